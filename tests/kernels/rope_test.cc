#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(Rope, RotatesQAndKByPositionAndLeavesV) {
  const int64_t seq = 5, batch = 2, heads = 3, d = 8, width = 3 * heads * d;
  Tensor qkv = RandomTensor({batch * seq, width}, 1);
  const auto before = Values(qkv);
  RopeForward(qkv, seq, heads, d, 10000.0);
  const auto after = Values(qkv);
  for (int64_t t = 0; t < batch * seq; ++t) {
    const double pos = static_cast<double>(t % seq);
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const size_t a = static_cast<size_t>(t * width + part * heads * d + h * d + i), b = a + d / 2;
          if (part == 2) {
            EXPECT_EQ(after[a], before[a]);
            continue;
          }
          const double ang = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / d);
          EXPECT_NEAR(after[a], before[a] * std::cos(ang) - before[b] * std::sin(ang), 1e-12);
          EXPECT_NEAR(after[b], before[a] * std::sin(ang) + before[b] * std::cos(ang), 1e-12);
        }
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const int64_t seq = 4, heads = 2, d = 6;
  Tensor x = RandomTensor({2 * seq, 3 * heads * d}, 2), g = RandomTensor({2 * seq, 3 * heads * d}, 3);
  auto loss = [&] {
    Tensor y = x.Clone();
    RopeForward(y, seq, heads, d, 500.0);
    return Dot(y, g);
  };
  Tensor dx = g.Clone();
  RopeBackward(dx, seq, heads, d, 500.0);
  EXPECT_TRUE(GradientMatches(loss, x, dx));
}

}  // namespace
}  // namespace moe::kernels
