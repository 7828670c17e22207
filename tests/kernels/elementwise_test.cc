// kernels/elementwise.h's FillUniform, the benchmarks' random inputs and force-balanced routing's
// scores on any device: seeded, uniform in [-1, 1), every element its own draw (no block repeats
// over a large tensor: matrix units run faster on repeating data), bf16 the rounding of f32's
// values.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace moe {
namespace {

namespace k = kernels;

TEST(FillUniform, SeededUniformAndNeverTiled) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  Tensor a = Tensor::Empty({kBlock + 7}, DType::kF32), b = Tensor::Empty({kBlock + 7}, DType::kF32);
  k::FillUniform(a, 3);
  k::FillUniform(b, 3);
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  EXPECT_EQ(va, vb) << "the same seed gives the same values";
  double sum = 0, sq = 0;
  for (const float v : va) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(va.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0 / 3.0, 0.01) << "uniform on [-1, 1): variance 1/3";
  int same = 0;  // the old fill repeated its first 2^20 values: every one of these matched
  for (int64_t i = 0; i < 7; ++i)
    same += va[static_cast<size_t>(kBlock + i)] == va[static_cast<size_t>(i)] ? 1 : 0;
  EXPECT_LT(same, 2) << "the values past 2^20 repeat the first ones";
  k::FillUniform(b, 4);
  EXPECT_NE(b.ToVector<float>(), va) << "another seed, other values";
  Tensor d = Tensor::Empty({1000}, DType::kF64);
  k::FillUniform(d, 3);
  const std::vector<double> vd = d.ToVector<double>();
  for (size_t i = 0; i < vd.size(); ++i)
    ASSERT_EQ(vd[i], va[i]) << "f64 holds the same draws " << i;
}

TEST(FillUniform, Bf16IsTheRoundedF32Fill) {
  Tensor f = Tensor::Empty({1001}, DType::kF32), h = Tensor::Empty({1001}, DType::kBF16);
  k::FillUniform(f, 9);
  k::FillUniform(h, 9);
  const std::vector<float> vf = f.ToVector<float>();
  const std::vector<BFloat16> vh = h.ToVector<BFloat16>();
  for (size_t i = 0; i < vf.size(); ++i) ASSERT_EQ(vh[i].bits, ToBFloat16(vf[i]).bits) << i;
}

}  // namespace
}  // namespace moe
