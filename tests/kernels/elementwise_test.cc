// kernels/elementwise.h's FillUniform, the benchmarks' random inputs on any device: seeded, uniform
// in
// [-1, 1), a block of 2^20 host values tiled over larger tensors, and bf16 the rounding of f32's
// values.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace moe {
namespace {

namespace k = kernels;

TEST(FillUniform, SeededUniformAndTiled) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  Tensor a = Tensor::Empty({kBlock + 7}, DType::kF32), b = Tensor::Empty({kBlock + 7}, DType::kF32);
  k::FillUniform(a, 3);
  k::FillUniform(b, 3);
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  EXPECT_EQ(va, vb) << "the same seed gives the same values";
  double sum = 0;
  for (int64_t i = 0; i < kBlock; ++i) {
    ASSERT_GE(va[static_cast<size_t>(i)], -1.0f) << i;
    ASSERT_LT(va[static_cast<size_t>(i)], 1.0f) << i;
    sum += va[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(sum / static_cast<double>(kBlock), 0.0, 0.01);
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_EQ(va[static_cast<size_t>(kBlock + i)], va[static_cast<size_t>(i)]) << i;
  k::FillUniform(b, 4);
  EXPECT_NE(b.ToVector<float>(), va) << "another seed, other values";
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
