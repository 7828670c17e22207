#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

// softmax(q k^T / sqrt(d)) v with a causal mask, one (sequence, head) at a time.
std::vector<double> RefAttention(const Tensor& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d) {
  const auto v = Values(qkv);
  const int64_t hd = heads * d, width = 3 * hd;
  std::vector<double> out(static_cast<size_t>(batch * seq * hd));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += v[static_cast<size_t>((b * seq + i) * width + h * d + c)] * v[static_cast<size_t>((b * seq + j) * width + hd + h * d + c)];
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((b * seq + j) * width + 2 * hd + h * d + c)];
          out[static_cast<size_t>((b * seq + i) * hd + h * d + c)] = o;
        }
      }
  return out;
}

TEST(Attention, ForwardMatchesReferenceAwkwardShape) {
  const int64_t batch = 3, seq = 37, heads = 3, d = 10;
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor qkv = RandomTensor({batch * seq, 3 * heads * d}, 1, dt, -2, 2);
    Tensor out = Tensor::Empty({batch * seq, heads * d}, dt), probs = Tensor::Empty({batch, heads, seq, seq}, dt);
    Poison(out);
    Poison(probs);
    AttentionForward(qkv, batch, seq, heads, d, out, probs);
    const double tol = dt == DType::kF64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(AllClose(out, RefAttention(qkv, batch, seq, heads, d), tol, tol)) << DTypeName(dt);
    // Above the diagonal the probabilities are exactly zero; each row sums to one.
    const auto p = Values(probs);
    for (int64_t r = 0; r < batch * heads * seq; ++r) {
      const int64_t i = r % seq;
      double sum = 0;
      for (int64_t j = 0; j < seq; ++j) {
        const double v = p[static_cast<size_t>(r * seq + j)];
        if (j > i) {
          ASSERT_EQ(v, 0.0);
        }
        sum += v;
      }
      ASSERT_NEAR(sum, 1.0, tol * 10);
    }
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const int64_t batch = 2, seq = 5, heads = 2, d = 4;
  Tensor qkv = RandomTensor({batch * seq, 3 * heads * d}, 2, DType::kF64, -1.5, 1.5);
  Tensor g = RandomTensor({batch * seq, heads * d}, 3);
  Tensor out = Tensor::Empty({batch * seq, heads * d}, DType::kF64), probs = Tensor::Empty({batch, heads, seq, seq}, DType::kF64);
  auto loss = [&] {
    AttentionForward(qkv, batch, seq, heads, d, out, probs);
    return Dot(out, g);
  };
  loss();
  Tensor dqkv = Tensor::Empty(qkv.shape(), DType::kF64);
  Poison(dqkv);
  AttentionBackward(qkv, probs, g, batch, seq, heads, d, dqkv);
  EXPECT_TRUE(GradientMatches(loss, qkv, dqkv));
}

}  // namespace
}  // namespace moe::kernels
