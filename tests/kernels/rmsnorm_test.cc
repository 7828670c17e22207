#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(RmsNorm, ForwardMatchesDefinition) {
  const int64_t rows = 67, d = 129;
  Tensor x = RandomTensor({rows, d}, 1), w = RandomTensor({d}, 2);
  Tensor y = Tensor::Empty({rows, d}, DType::kF64), rstd = Tensor::Empty({rows}, DType::kF64);
  Poison(y);
  Poison(rstd);
  RmsNormForward(x, w, 1e-6, y, rstd);
  std::vector<double> ref(static_cast<size_t>(rows * d));
  const auto xv = Values(x), wv = Values(w);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j)
      ss += xv[static_cast<size_t>(r * d + j)] * xv[static_cast<size_t>(r * d + j)];
    const double inv = 1 / std::sqrt(ss / d + 1e-6);
    for (int64_t j = 0; j < d; ++j)
      ref[static_cast<size_t>(r * d + j)] =
          xv[static_cast<size_t>(r * d + j)] * inv * wv[static_cast<size_t>(j)];
  }
  EXPECT_TRUE(AllClose(y, ref, 1e-12, 1e-12));
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 9, d = 17;
  Tensor x = RandomTensor({rows, d}, 3), w = RandomTensor({d}, 4), g = RandomTensor({rows, d}, 5);
  auto loss = [&] {
    Tensor y = Tensor::Empty({rows, d}, DType::kF64), rstd = Tensor::Empty({rows}, DType::kF64);
    RmsNormForward(x, w, 1e-6, y, rstd);
    return Dot(y, g);
  };
  Tensor y = Tensor::Empty({rows, d}, DType::kF64), rstd = Tensor::Empty({rows}, DType::kF64);
  RmsNormForward(x, w, 1e-6, y, rstd);
  Tensor dx = Tensor::Empty({rows, d}, DType::kF64), dw = Tensor::Zeros({d}, DType::kF64);
  Poison(dx);
  RmsNormBackward(g, x, w, rstd, dx, dw);
  EXPECT_TRUE(GradientMatches(loss, x, dx));
  EXPECT_TRUE(GradientMatches(loss, w, dw));
}

}  // namespace
}  // namespace moe::kernels
