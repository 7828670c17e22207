// FP8 training (--precision fp8), emulated on the CPU: which weights train in FP8 (DeepSeek-V3's
// recipe: the linear layers; not the embedding, head, router or norms); a linear layer's three
// GEMMs against a reference built here from the quantisation primitives (1 x 128 activation tiles,
// 128 x 128 weight blocks, 128 x 1 tiles along the tokens for the weight gradient); training tracks
// bf16's loss.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "tests/engine/train_helpers.h"
#include "tests/testing/testing.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

namespace fp8 = kernels::fp8;

std::vector<float> AsFloats(const Tensor& t) {
  Tensor f = Tensor::Empty(t.shape(), DType::kF32);
  kernels::Convert(t, f);
  return f.ToVector<float>();
}

Tensor RandomBf16(int64_t rows, int64_t cols, uint64_t seed, double scale) {
  Tensor f = Tensor::Empty({rows, cols}, DType::kF32);
  Rng rng(seed);
  for (int64_t i = 0; i < f.numel(); ++i)
    f.data<float>()[i] = static_cast<float>(scale * rng.Normal());
  Tensor b = Tensor::Empty({rows, cols}, DType::kBF16);
  kernels::Convert(f, b);
  return b;
}

// Dequantize(Quantize(...)) of a row-major [rows, cols] matrix.
std::vector<float> Fp8(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t tr,
                       int64_t tc) {
  return fp8::Dequantize(fp8::Quantize(x.data(), rows, cols, tr, tc));
}

// c[i][j] = sum_l a(i, l) * b(l, j) in double, with accessors for the transposes.
template <typename A, typename B>
std::vector<double> Product(int64_t m, int64_t n, int64_t k, A a, B b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += static_cast<double>(a(i, l)) * b(l, j);
      c[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return c;
}

// max |got - want| / max |want|
double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

TEST(Fp8Training, OnlyTheLinearLayersWeightsTrainInFp8) {
  parallel::LocalParallel local;
  model::ModelOptions o;
  o.dtype = DType::kF32;
  o.device = Device::Cpu();
  o.compute = DType::kBF16;
  o.fp8 = true;
  model::Model model(*ModelPreset("tiny"), local.ctx, 3, o);
  int fp8 = 0;
  for (const auto& p : model.params().all()) {
    const std::string& n = p->name;
    const bool high = n == "embedding" || n == "head" || n.find("router") != std::string::npos ||
                      n.find("norm") != std::string::npos;
    EXPECT_EQ(p->fp8, !high) << n;
    fp8 += p->fp8;
  }
  // Per MLA block q_a, q_b, kv_a, kv_b, o (5), per FFN w13 and w2 (the dense block's, each MoE
  // block's experts and shared expert), and MTP's projection (whose block has attention and an MoE
  // FFN).
  const ModelConfig& c = model.config();
  const int blocks = c.num_layers + c.mtp_depth, moe_blocks = blocks - c.first_k_dense;
  EXPECT_EQ(fp8, 5 * blocks + 2 * c.first_k_dense + 4 * moe_blocks + c.mtp_depth);
  model::Model bf16(*ModelPreset("tiny"), local.ctx, 3, DType::kF32, Device::Cpu(), nullptr,
                    DType::kBF16);
  for (const auto& p : bf16.params().all()) EXPECT_FALSE(p->fp8) << p->name;
}

TEST(Fp8Training, ALinearLayersThreeGemmsUseTheTiledE4m3Inputs) {
  const int64_t t = 200, in = 160, out = 136;  // partial tiles along every dimension
  model::ParamSet params(DType::kF32, Device::Cpu(), DType::kBF16, std::nullopt,
                         /*fp8_gemms=*/true);
  model::Param* w = params.Fp8Gemm(params.Add("w", {out, in}, 5, 0.05));
  ASSERT_TRUE(w->fp8);
  const Tensor x = RandomBf16(t, in, 6, 1.0), dy = RandomBf16(t, out, 7, 0.01);
  const std::vector<float> xf = AsFloats(x), wf = AsFloats(w->compute), dyf = AsFloats(dy);

  // Fprop: x in 1 x 128 tiles, w in 128 x 128 blocks.
  const std::vector<float> xq = Fp8(xf, t, in, 1, 128), wq = Fp8(wf, out, in, 128, 128);
  const auto y_ref = Product(
      t, out, in, [&](int64_t i, int64_t l) { return xq[i * in + l]; },
      [&](int64_t l, int64_t j) { return wq[j * in + l]; });
  const Tensor y = model::Linear(x, *w);
  EXPECT_EQ(y.dtype(), DType::kBF16);
  EXPECT_LT(RelErr(AsFloats(y), y_ref), 1.0 / 256) << "bf16 rounding of the fp32 GEMM only";
  const auto y_exact = Product(
      t, out, in, [&](int64_t i, int64_t l) { return xf[i * in + l]; },
      [&](int64_t l, int64_t j) { return wf[j * in + l]; });
  EXPECT_GT(RelErr(AsFloats(y), y_exact), 1.0 / 256) << "the inputs were quantised";

  // Dgrad: dy in 1 x 128 tiles along its reduction (out), the same weight blocks.
  const std::vector<float> dyq = Fp8(dyf, t, out, 1, 128);
  const auto dx_ref = Product(
      t, in, out, [&](int64_t i, int64_t l) { return dyq[i * out + l]; },
      [&](int64_t l, int64_t j) { return wq[l * in + j]; });
  const Tensor dx = model::LinearBackward(dy, x, *w);
  EXPECT_EQ(dx.dtype(), DType::kBF16);
  EXPECT_LT(RelErr(AsFloats(dx), dx_ref), 1.0 / 256);

  // Wgrad: dy and x in 128 x 1 tiles along the tokens (its reduction), accumulated in fp32.
  const std::vector<float> dyc = Fp8(dyf, t, out, 128, 1), xc = Fp8(xf, t, in, 128, 1);
  const auto dw_ref = Product(
      out, in, t, [&](int64_t i, int64_t l) { return dyc[l * out + i]; },
      [&](int64_t l, int64_t j) { return xc[l * in + j]; });
  EXPECT_LT(RelErr(w->grad.ToVector<float>(), dw_ref), 1e-5);
}

TEST(Fp8Training, TrainingTracksBf16) {
  const std::string base = "/tmp/moe-fp8-train-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  spec.training.steps = 40;
  auto losses = [&](const std::string& precision) {
    parallel::LocalParallel local;
    train::TrainerOptions o;
    o.precision = precision;
    o.peak_flops = 1e11;
    o.log_steps = false;
    std::vector<double> out;
    o.on_step = [&](const train::StepMetrics& m) { out.push_back(m.loss); };
    auto r = train::Train(spec, local.ctx, o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      EXPECT_EQ(r->precision, precision);
    }
    return out;
  };
  const std::vector<double> bf16 = losses("bf16"), fp8 = losses("fp8");
  ASSERT_EQ(bf16.size(), 40u);
  ASSERT_EQ(fp8.size(), 40u);
  bool differ = false;
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_NEAR(fp8[i], bf16[i], 0.02 * bf16[i]) << "step " << i + 1;
    differ |= fp8[i] != bf16[i];
  }
  EXPECT_TRUE(differ) << "fp8 trained exactly like bf16: the FP8 GEMMs did not run";
  EXPECT_LT(fp8.back(), 0.9 * fp8.front()) << "fp8 training should learn";
  (void)RemoveAll(base);
}

}  // namespace
}  // namespace moe
