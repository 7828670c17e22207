// RoPE on a block of columns of every head: both layouts against the rotation written out, the
// backward against finite differences.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

Tensor Freqs(int64_t d, double theta) {
  Tensor f = Tensor::Empty({d / 2}, DType::kF64);
  for (int64_t i = 0; i < d / 2; ++i)
    f.data<double>()[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return f;
}

// Decoding continues a sequence: rows rotated from first position p are the rows at p.. of a
// longer sequence rotated from 0.
TEST(Rope, AFirstPositionContinuesTheSequence) {
  const int64_t heads = 2, stride = 12, offset = 4, d = 8, p = 9, n = 3;
  const Tensor freqs = Freqs(d, 10000.0);
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kPairs}) {
    Tensor whole = RandomTensor({p + n, heads * stride}, 4);
    Tensor tail = whole.Rows(p, p + n).Clone();
    RopeForward(whole, p + n, heads, offset, freqs, layout);
    RopeForward(tail, n, heads, offset, freqs, layout, p);
    const auto want = Values(whole.Rows(p, p + n).Clone()), got = Values(tail);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << i;
    RopeBackward(tail, n, heads, offset, freqs, layout, p);
    const auto back = Values(tail);
    const auto orig = Values(RandomTensor({p + n, heads * stride}, 4).Rows(p, p + n).Clone());
    for (size_t i = 0; i < back.size(); ++i) ASSERT_NEAR(back[i], orig[i], 1e-12) << i;
  }
}

TEST(Rope, RotatesTheBlockOfEveryHeadAndLeavesTheRest) {
  // 3 heads of 10 columns; rotated: columns [2, 8) of each head (offset 2, 6 rotary dims).
  const int64_t seq = 5, batch = 2, heads = 3, stride = 10, offset = 2, d = 6;
  const Tensor freqs = Freqs(d, 10000.0);
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kPairs}) {
    Tensor x = RandomTensor({batch * seq, heads * stride}, 1);
    const auto before = Values(x);
    RopeForward(x, seq, heads, offset, freqs, layout);
    const auto after = Values(x);
    for (int64_t t = 0; t < batch * seq; ++t) {
      const double pos = static_cast<double>(t % seq);
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>(t * heads * stride + h * stride);
        for (int64_t c = 0; c < stride; ++c) {
          if (c < offset || c >= offset + d) {
            EXPECT_EQ(after[base + static_cast<size_t>(c)], before[base + static_cast<size_t>(c)]);
          }
        }
        for (int64_t i = 0; i < d / 2; ++i) {
          const size_t a =
              base + static_cast<size_t>(offset + (layout == RopeLayout::kPairs ? 2 * i : i));
          const size_t b = a + (layout == RopeLayout::kPairs ? 1 : static_cast<size_t>(d / 2));
          const double ang = pos * freqs.data<double>()[i];
          EXPECT_NEAR(after[a], before[a] * std::cos(ang) - before[b] * std::sin(ang), 1e-12);
          EXPECT_NEAR(after[b], before[a] * std::sin(ang) + before[b] * std::cos(ang), 1e-12);
        }
      }
    }
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const int64_t seq = 4, heads = 2, stride = 9, offset = 3, d = 6;
  const Tensor freqs = Freqs(d, 500.0);
  for (RopeLayout layout : {RopeLayout::kHalfSplit, RopeLayout::kPairs}) {
    Tensor x = RandomTensor({2 * seq, heads * stride}, 2),
           g = RandomTensor({2 * seq, heads * stride}, 3);
    auto loss = [&] {
      Tensor y = x.Clone();
      RopeForward(y, seq, heads, offset, freqs, layout);
      return Dot(y, g);
    };
    Tensor dx = g.Clone();
    RopeBackward(dx, seq, heads, offset, freqs, layout);
    EXPECT_TRUE(GradientMatches(loss, x, dx));
  }
}

}  // namespace
}  // namespace moe::kernels
