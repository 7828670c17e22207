// The head and the loss with their backward fused and chunked (worker/engine/model/head_loss.h),
// against the unfused sequence it replaced (the fp32 logits kept whole, the gradient written over
// them, cast to the activations' dtype, then the head's two backward GEMMs): bit for bit in one
// chunk, within rounding in several; the deterministic accumulator; the sink on the device's
// double; the memory one chunk takes; bad input.
#include "worker/engine/model/head_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/memory_model.h"
#include "common/rng.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/memory_stats.h"
#include "worker/engine/model/layers.h"

namespace moe::model {
namespace {

Tensor Random(const Tensor::Shape& shape, uint64_t seed, double scale) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
  return t;
}

struct Case {
  int64_t rows = 37, hidden = 24, vocab = 301;
  DType compute = DType::kF32;  // the activations' (and the head's compute copy's) dtype
  bool deterministic = false;   // the head's gradient through an f64 accumulator
};

struct Fixture {
  Param head;
  Tensor hn, targets;
};

Fixture Make(const Case& c) {
  Fixture f;
  f.head.name = "head";
  f.head.value = Random({c.vocab, c.hidden}, 1, 0.5);
  f.head.compute = CastTo(f.head.value, c.compute);
  f.head.grad = Tensor::Zeros({c.vocab, c.hidden}, DType::kF32, Device::Cpu());
  if (c.deterministic)
    f.head.accum = Tensor::Zeros({c.vocab, c.hidden}, DType::kF64, Device::Cpu());
  f.hn = CastTo(Random({c.rows, c.hidden}, 2, 2.0), c.compute);
  f.targets = Tensor::Empty({c.rows}, DType::kI32);
  Rng rng(3);
  for (int64_t i = 0; i < c.rows; ++i)
    f.targets.data<int32_t>()[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(c.vocab)));
  return f;
}

struct Result {
  double loss = 0;
  std::vector<double> dhn, grad;
};

std::vector<double> Values(const Tensor& t) {
  const Tensor f = CastTo(t, DType::kF64);
  return std::vector<double>(f.data<double>(), f.data<double>() + f.numel());
}

Result Read(const Fixture& f, double loss, const Tensor& dhn) {
  return {loss, Values(dhn), Values(f.head.accum.defined() ? f.head.accum : f.head.grad)};
}

// What the model ran before: the whole [rows, vocab] fp32 logits, their gradient in place, a cast,
// then LinearBackward.
Result Unfused(const Case& c, double scale) {
  Fixture f = Make(c);
  Tensor logits = Linear(f.hn, f.head.compute, DType::kF32);
  const double loss = kernels::CrossEntropy(logits, f.targets, scale, logits);
  const Tensor dhn = LinearBackward(CastTo(logits, c.compute), f.hn, f.head);
  return Read(f, loss, dhn);
}

// The loss in chunks of `rows` (0: LossChunkRows's), the setting restored after.
HeadLoss InChunks(int64_t rows, const Fixture& f, double scale, const LossSink& sink) {
  SetLossChunkRows(rows);
  HeadLoss hl = HeadLossForwardBackward(f.hn, f.head, DType::kF32, f.targets, scale, sink);
  SetLossChunkRows(0);
  return hl;
}

Result Fused(const Case& c, double scale, int64_t chunk_rows) {
  Fixture f = Make(c);
  HeadLoss hl = InChunks(chunk_rows, f, scale, LossSink{});
  EXPECT_EQ(hl.dhn.shape(), f.hn.shape());
  EXPECT_EQ(hl.dhn.dtype(), c.compute);
  return Read(f, hl.ce_sum, hl.dhn);
}

// Worst |a - b| relative to b's largest magnitude.
double RelErr(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, top = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]));
    top = std::max(top, std::fabs(b[i]));
  }
  return worst / top;
}

TEST(HeadLoss, OneChunkIsTheUnfusedSequenceBitForBit) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool det : {false, true}) {
      Case c;
      c.compute = dt;
      c.deterministic = det;
      const Result want = Unfused(c, 0.25), got = Fused(c, 0.25, 0);
      const std::string at = std::string(DTypeName(dt)) + (det ? " deterministic" : "");
      EXPECT_EQ(got.loss, want.loss) << at;
      EXPECT_EQ(got.dhn, want.dhn) << at;
      EXPECT_EQ(got.grad, want.grad) << at;
    }
  }
}

TEST(HeadLoss, ChunksAgreeWithOneChunkWithinRounding) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Case c;
    c.compute = dt;
    const Result whole = Fused(c, 0.5, c.rows);
    // fp32 reorders sums only; bf16 rounds the products it feeds the GEMMs (the same values per
    // row: the row's gradient does not depend on the chunk).
    const double tol = dt == DType::kF32 ? 1e-6 : 1e-2;
    for (int64_t chunk : {1, 3, 7, 36}) {
      const Result got = Fused(c, 0.5, chunk);
      const std::string at = std::string(DTypeName(dt)) + " chunk " + std::to_string(chunk);
      EXPECT_NEAR(got.loss, whole.loss, 1e-12 * std::fabs(whole.loss)) << at;
      EXPECT_LE(RelErr(got.dhn, whole.dhn), tol) << at;
      EXPECT_LE(RelErr(got.grad, whole.grad), tol) << at;
      double largest = 0;
      for (double g : got.grad) largest = std::max(largest, std::fabs(g));
      EXPECT_GT(largest, 1e-3) << at << ": the head's gradient is all but zero";
    }
  }
}

TEST(HeadLoss, TheSinkTakesTheLossOnTheDevicesDouble) {
  Case c;
  Fixture f = Make(c);
  Tensor acc = Tensor::Zeros({3}, DType::kF64, Device::Cpu());
  acc.data<double>()[1] = 10.0;
  const HeadLoss hl = InChunks(5, f, 1.0, LossSink{acc, 1});
  EXPECT_EQ(hl.ce_sum, 0.0);
  const Result ref = Fused(c, 1.0, c.rows);
  EXPECT_NEAR(acc.data<double>()[1] - 10.0, ref.loss, 1e-12 * ref.loss);
  EXPECT_EQ(acc.data<double>()[0], 0.0);
  EXPECT_EQ(acc.data<double>()[2], 0.0);
}

// The chunk bounds the loss's transient memory: with a chunk of 4 rows the peak stays below what
// the [rows, vocab] logits alone take.
TEST(HeadLoss, OneChunkOfLogitsAtATime) {
  Case c;
  c.rows = 64;
  c.vocab = 4096;
  Fixture f = Make(c);
  const int64_t whole_logits = c.rows * c.vocab * 4;
  ResetPeakMemory(0);
  const int64_t before = GetMemoryUsage(0).total();
  (void)InChunks(4, f, 1.0, LossSink{});
  const int64_t chunked = GetMemoryUsage(0).peak - before;
  ResetPeakMemory(0);
  (void)InChunks(0, f, 1.0, LossSink{});
  const int64_t whole = GetMemoryUsage(0).peak - before;
  EXPECT_LT(chunked, whole_logits / 4) << "chunked peak " << chunked;
  EXPECT_GE(whole, whole_logits) << "one chunk's peak " << whole;
}

TEST(HeadLoss, ChunkRowsFollowTheBudget) {
  EXPECT_EQ(LossChunkRows(4096, 129280, 4), 2048);      // 2,076 fit: whole tiles of 128 rows
  EXPECT_EQ(LossChunkRows(4096, 129280 * 20, 4), 103);  // under 128 rows: as many as fit
  EXPECT_EQ(LossChunkRows(4096, 2048, 4), 4096);        // a small vocabulary: one chunk
  EXPECT_EQ(LossChunkRows(4096, int64_t{1} << 40, 4), 1);
  EXPECT_EQ(LossChunkRows(0, 2048, 4), 1);
}

TEST(HeadLossDeathTest, BadInputNamesWhatIsWrong) {
  Case c;
  Fixture f = Make(c);
  const Tensor short_targets = f.targets.Rows(0, c.rows - 1);
  EXPECT_DEATH(
      (void)HeadLossForwardBackward(f.hn, f.head, DType::kF32, short_targets, 1.0, LossSink{}),
      "head loss: targets");
  EXPECT_DEATH((void)HeadLossForwardBackward(f.hn.Reshape({c.rows * 2, c.hidden / 2}), f.head,
                                             DType::kF32, f.targets, 1.0, LossSink{}),
               "head loss: hidden states");
  f.head.fp8 = true;
  EXPECT_DEATH((void)HeadLossForwardBackward(f.hn, f.head, DType::kF32, f.targets, 1.0, LossSink{}),
               "never trains in FP8");
}

}  // namespace
}  // namespace moe::model
