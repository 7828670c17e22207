// bf16 on the CPU: rounding, conversions, and every kernel family run on bf16 tensors against the
// same call in fp32 on the same (bf16-representable) inputs. The CPU's bf16 path is the reference
// the CUDA bf16 kernels are checked against, so it must itself be right.
#include <gtest/gtest.h>

#include <cmath>

#include "common/rng.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/optimizer.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace moe {
namespace {

namespace k = kernels;

uint16_t Bits(float f) { return ToBFloat16(f).bits; }

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(Bits(1.0f), 0x3F80);
  EXPECT_EQ(Bits(-2.0f), 0xC000);
  EXPECT_EQ(Bits(1.0f + 1.0f / 256),
            0x3F80);  // halfway between 1 and 1 + 2^-7: to the even one (1)
  EXPECT_EQ(Bits(1.0f + 3.0f / 256),
            0x3F82);  // halfway between 1 + 2^-7 and 1 + 2^-6: to the even one
  EXPECT_EQ(Bits(1.0f + 1.5f / 256), 0x3F81);  // above halfway: up
  EXPECT_EQ(Bits(INFINITY), 0x7F80);
  EXPECT_TRUE(std::isnan(FromBFloat16(ToBFloat16(NAN))));
  EXPECT_EQ(Bits(3.4e38f), 0x7F80)
      << "the largest floats round to infinity, as __float2bfloat16_rn does";
  for (float f : {0.0f, -0.0f, 1.5f, 0x1p-100f, -123.0f}) EXPECT_EQ(FromBFloat16(ToBFloat16(f)), f);
}

Tensor Random(const Tensor::Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) {
    // bf16-representable values, so the fp32 and bf16 runs see the same inputs
    t.data<float>()[i] =
        FromBFloat16(ToBFloat16(static_cast<float>(lo + (hi - lo) * rng.Uniform())));
  }
  return t;
}

Tensor Bf16(const Tensor& t) {
  Tensor b = Tensor::Empty(t.shape(), DType::kBF16);
  k::Convert(t, b);
  return b;
}

Tensor F32(const Tensor& t) {
  Tensor f = Tensor::Empty(t.shape(), DType::kF32);
  k::Convert(t, f);
  return f;
}

// max |a - b| / max |b| (normwise relative error).
double RelErr(const Tensor& a, const Tensor& b) {
  const Tensor fa = F32(a), fb = F32(b);
  double num = 0, den = 0;
  for (int64_t i = 0; i < fa.numel(); ++i) {
    num = std::max(num, static_cast<double>(std::fabs(fa.data<float>()[i] - fb.data<float>()[i])));
    den = std::max(den, static_cast<double>(std::fabs(fb.data<float>()[i])));
  }
  return num / den;
}

TEST(BFloat16, ConvertRoundTripsWithinHalfAnUlp) {
  Tensor x = Tensor::Empty({1000}, DType::kF32);
  Rng rng(1);
  for (int64_t i = 0; i < 1000; ++i) x.data<float>()[i] = static_cast<float>(rng.Normal() * 100);
  Tensor back = F32(Bf16(x));
  for (int64_t i = 0; i < 1000; ++i) {
    const float a = x.data<float>()[i], b = back.data<float>()[i];
    EXPECT_LE(std::fabs(a - b), std::ldexp(std::fabs(a), -8)) << a << " -> " << b;
  }
}

TEST(BFloat16, GemmIntoBf16AndIntoAnFp32Accumulator) {
  Tensor a = Random({33, 70}, 2), b = Random({45, 70}, 3);
  Tensor ref = Tensor::Empty({33, 45}, DType::kF32), got = Tensor::Empty({33, 45}, DType::kBF16);
  k::Gemm(a, false, b, true, ref);
  k::Gemm(Bf16(a), false, Bf16(b), true, got);
  EXPECT_LT(RelErr(got, ref), 4e-3);
  // bf16 inputs, fp32 C accumulated (how weight gradients are kept): fp32 accuracy.
  Tensor acc = Random({33, 45}, 4), acc_ref = acc.Clone();
  k::Gemm(a, false, b, true, acc_ref, 0.5, 1.0);
  k::Gemm(Bf16(a), false, Bf16(b), true, acc, 0.5, 1.0);
  EXPECT_LT(RelErr(acc, acc_ref), 1e-6);
}

TEST(BFloat16, EveryFamilyTracksFp32) {
  const int64_t r = 37, d = 48, f = 24;
  {
    Tensor x = Random({r, d}, 5), w = Random({d}, 6), g = Random({r, d}, 7);
    Tensor y = Tensor::Empty({r, d}, DType::kF32), rstd = Tensor::Empty({r}, DType::kF32);
    Tensor yb = Tensor::Empty({r, d}, DType::kBF16), rstdb = Tensor::Empty({r}, DType::kF32);
    k::RmsNormForward(x, w, 1e-6, y, rstd);
    k::RmsNormForward(Bf16(x), Bf16(w), 1e-6, yb, rstdb);
    EXPECT_LT(RelErr(yb, y), 1e-2) << "rmsnorm";
    EXPECT_LT(RelErr(rstdb, rstd), 1e-6) << "rstd is fp32 from the same inputs";
    Tensor dx = Tensor::Empty({r, d}, DType::kF32), dw = Tensor::Zeros({d}, DType::kF32);
    Tensor dxb = Tensor::Empty({r, d}, DType::kBF16), dwb = Tensor::Zeros({d}, DType::kF32);
    k::RmsNormBackward(g, x, w, rstd, dx, dw);
    k::RmsNormBackward(Bf16(g), Bf16(x), Bf16(w), rstdb, dxb, dwb);
    EXPECT_LT(RelErr(dxb, dx), 1e-2) << "rmsnorm dx";
    EXPECT_LT(RelErr(dwb, dw), 1e-5) << "rmsnorm dw accumulates in fp32";
  }
  {
    Tensor gu = Random({r, 2 * f}, 8, -3, 3), g = Random({r, f}, 9);
    Tensor out = Tensor::Empty({r, f}, DType::kF32), outb = Tensor::Empty({r, f}, DType::kBF16);
    k::SwigluForward(gu, out);
    k::SwigluForward(Bf16(gu), outb);
    EXPECT_LT(RelErr(outb, out), 1e-2) << "swiglu";
    Tensor dgu = Tensor::Empty({r, 2 * f}, DType::kF32),
           dgub = Tensor::Empty({r, 2 * f}, DType::kBF16);
    k::SwigluBackward(gu, g, dgu);
    k::SwigluBackward(Bf16(gu), Bf16(g), dgub);
    EXPECT_LT(RelErr(dgub, dgu), 1e-2) << "swiglu bwd";
  }
  {
    const int64_t b = 2, s = 9, h = 2, hd = 8;
    Tensor q = Random({b * s, h * hd}, 10, -2, 2), kk = Random({b * s, h * hd}, 13, -2, 2),
           v = Random({b * s, h * hd}, 14);
    Tensor g = Random({b * s, h * hd}, 11);
    Tensor freqs = Tensor::Empty({hd / 2}, DType::kF32);
    for (int64_t i = 0; i < hd / 2; ++i)
      freqs.data<float>()[i] =
          static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / hd));
    Tensor rq = q.Clone(), rqb = Bf16(q);
    k::RopeForward(rq, s, h, 0, freqs, k::RopeLayout::kPairs);
    k::RopeForward(rqb, s, h, 0, freqs, k::RopeLayout::kPairs);
    EXPECT_LT(RelErr(rqb, rq), 1e-2) << "rope";
    Tensor out = Tensor::Empty({b * s, h * hd}, DType::kF32),
           outb = Tensor::Empty({b * s, h * hd}, DType::kBF16);
    Tensor lse = Tensor::Empty({b * h * s}, DType::kF32),
           lseb = Tensor::Empty({b * h * s}, DType::kF32);
    k::AttentionForward(q, kk, v, b, s, h, 0.35, out, lse);
    k::AttentionForward(Bf16(q), Bf16(kk), Bf16(v), b, s, h, 0.35, outb, lseb);
    EXPECT_LT(RelErr(outb, out), 1e-2) << "attention";
    Tensor dq = Tensor::Empty(q.shape(), DType::kF32), dk = Tensor::Empty(q.shape(), DType::kF32),
           dv = Tensor::Empty(q.shape(), DType::kF32);
    Tensor dqb = Tensor::Empty(q.shape(), DType::kBF16),
           dkb = Tensor::Empty(q.shape(), DType::kBF16),
           dvb = Tensor::Empty(q.shape(), DType::kBF16);
    k::AttentionBackward(q, kk, v, out, g, lse, b, s, h, 0.35, dq, dk, dv);
    k::AttentionBackward(Bf16(q), Bf16(kk), Bf16(v), outb, Bf16(g), lseb, b, s, h, 0.35, dqb, dkb,
                         dvb);
    EXPECT_LT(RelErr(dqb, dq), 2e-2) << "attention bwd dq";
    EXPECT_LT(RelErr(dvb, dv), 2e-2) << "attention bwd dv";
  }
  {
    const int64_t v = 50;
    Tensor logits = Random({r, v}, 12, -4, 4);
    Tensor targets = Tensor::Empty({r}, DType::kI32);
    for (int64_t i = 0; i < r; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>(i * 7 % v);
    Tensor grad = Tensor::Empty({r, v}, DType::kF32), gradb = Tensor::Empty({r, v}, DType::kBF16);
    const double loss = k::CrossEntropy(logits, targets, 1.0, grad);
    const double lossb = k::CrossEntropy(Bf16(logits), targets, 1.0, gradb);
    EXPECT_NEAR(lossb, loss, 1e-5 * std::fabs(loss)) << "the loss of the same logits";
    EXPECT_LT(RelErr(gradb, grad), 1e-2);
  }
  {
    Tensor table = Random({13, d}, 13), g = Random({r, d}, 14);
    Tensor ids = Tensor::Empty({r}, DType::kI32);
    for (int64_t i = 0; i < r; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(i * 5 % 13);
    Tensor out = Tensor::Empty({r, d}, DType::kBF16), ref = Tensor::Empty({r, d}, DType::kF32);
    k::EmbeddingForward(Bf16(table), ids, out);
    k::EmbeddingForward(table, ids, ref);
    EXPECT_EQ(RelErr(out, ref), 0.0) << "a lookup of representable values is exact";
    Tensor dt = Tensor::Zeros({13, d}, DType::kF32), dtb = Tensor::Zeros({13, d}, DType::kF32);
    k::EmbeddingBackward(g, ids, dt);
    k::EmbeddingBackward(Bf16(g), ids, dtb);
    EXPECT_LT(RelErr(dtb, dt), 1e-6) << "the table gradient accumulates in fp32";
  }
  {
    const std::vector<int64_t> offsets = {0, 10, 10, r};
    Tensor x = Random({r, d}, 15), w = Random({3, f, d}, 16), dy = Random({r, f}, 17);
    Tensor y = Tensor::Empty({r, f}, DType::kF32), yb = Tensor::Empty({r, f}, DType::kBF16);
    k::GroupedGemm(x, w, offsets, y);
    k::GroupedGemm(Bf16(x), Bf16(w), offsets, yb);
    EXPECT_LT(RelErr(yb, y), 1e-2) << "grouped gemm";
    Tensor dw = Tensor::Zeros({3, f, d}, DType::kF32), dwb = Tensor::Zeros({3, f, d}, DType::kF32);
    k::GroupedGemmBackwardWeight(dy, x, offsets, dw);
    k::GroupedGemmBackwardWeight(Bf16(dy), Bf16(x), offsets, dwb);
    EXPECT_LT(RelErr(dwb, dw), 1e-6) << "expert weight gradients accumulate in fp32";
  }
}

TEST(BFloat16, AdamWRefusesBf16MasterWeights) {
  Tensor p = Tensor::Zeros({4}, DType::kBF16), g = Tensor::Zeros({4}, DType::kF32);
  EXPECT_DEATH(k::AdamW(p, g, g.Clone(), g.Clone(), k::AdamWConfig{}), "fp32 master weights");
}

}  // namespace
}  // namespace moe
