#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(CrossEntropy, LossMatchesLogSoftmaxAndGradientMatchesFiniteDifferences) {
  const int64_t rows = 6, vocab = 37;
  Tensor logits = RandomTensor({rows, vocab}, 1, DType::kF64, -5, 5);
  Tensor targets = RandomInts({rows}, 2, static_cast<int32_t>(vocab));
  const auto lv = Values(logits);
  double ref = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, lv[static_cast<size_t>(r * vocab + j)]);
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(lv[static_cast<size_t>(r * vocab + j)] - mx);
    ref += mx + std::log(sum) - lv[static_cast<size_t>(r * vocab + targets.data<int32_t>()[r])];
  }
  EXPECT_NEAR(CrossEntropy(logits, targets, 1.0, Tensor()), ref, 1e-10);
  const double scale = 0.37;
  auto loss = [&] { return scale * CrossEntropy(logits, targets, 1.0, Tensor()); };
  Tensor grad = Tensor::Empty(logits.shape(), DType::kF64);
  Poison(grad);
  CrossEntropy(logits, targets, scale, grad);
  EXPECT_TRUE(GradientMatches(loss, logits, grad));
  // In place: the logits' buffer takes the gradient.
  Tensor inplace = logits.Clone();
  EXPECT_NEAR(CrossEntropy(inplace, targets, scale, inplace), ref, 1e-10);
  EXPECT_TRUE(AllClose(inplace, grad, 1e-14, 1e-14));
}

TEST(CrossEntropy, StableForHugeLogits) {
  Tensor logits = Tensor::FromVector<float>({1000.f, -1000.f, 0.f, 999.f}, {2, 2});
  Tensor targets = Tensor::FromVector<int32_t>({0, 1}, {2});
  const double loss = CrossEntropy(logits, targets, 1.0, Tensor());
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, 0.0, 1e-3);  // both targets hold the largest logit by a mile
}

}  // namespace
}  // namespace moe::kernels
