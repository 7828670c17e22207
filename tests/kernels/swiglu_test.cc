#include "kernels/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(Swiglu, ForwardMatchesDefinitionAndBackwardMatchesFiniteDifferences) {
  const int64_t rows = 7, f = 11;
  Tensor gu = RandomTensor({rows, 2 * f}, 1, DType::kF64, -4, 4), g = RandomTensor({rows, f}, 2);
  Tensor out = Tensor::Empty({rows, f}, DType::kF64);
  Poison(out);
  SwigluForward(gu, out);
  const auto v = Values(gu);
  std::vector<double> ref(static_cast<size_t>(rows * f));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const double a = v[static_cast<size_t>(r * 2 * f + j)],
                   u = v[static_cast<size_t>(r * 2 * f + f + j)];
      ref[static_cast<size_t>(r * f + j)] = a / (1 + std::exp(-a)) * u;
    }
  EXPECT_TRUE(AllClose(out, ref, 1e-12, 1e-12));
  auto loss = [&] {
    SwigluForward(gu, out);
    return Dot(out, g);
  };
  Tensor dgu = Tensor::Empty(gu.shape(), DType::kF64);
  Poison(dgu);
  SwigluBackward(gu, g, dgu);
  EXPECT_TRUE(GradientMatches(loss, gu, dgu));
}

}  // namespace
}  // namespace moe::kernels
