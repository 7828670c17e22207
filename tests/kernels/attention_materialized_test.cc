// The materialised (textbook) causal attention against the tiled kernel: the same outputs and
// gradients at tile-crossing lengths, d_qk != d_v, one and many heads, f32 and f64; and the
// probabilities it keeps are a causal softmax.
#include "kernels/attention_materialized.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

struct Shape {
  int64_t batch, seq, heads, dqk, dv;
};

struct Inputs {
  Tensor q, k, v, dout;
};

Inputs MakeInputs(const Shape& s, DType dt) {
  const int64_t t = s.batch * s.seq;
  return {RandomTensor({t, s.heads * s.dqk}, 11, dt, -1.5, 1.5),
          RandomTensor({t, s.heads * s.dqk}, 12, dt, -1.5, 1.5),
          RandomTensor({t, s.heads * s.dv}, 13, dt), RandomTensor({t, s.heads * s.dv}, 14, dt)};
}

Tensor Poisoned(const Tensor::Shape& shape, DType dt) {
  Tensor t = Tensor::Empty(shape, dt);
  Poison(t);
  return t;
}

// Forward and backward of both kernels on the same inputs; outputs and gradients within `tol`.
void CheckAgainstFlash(const Shape& s, DType dt, double tol) {
  const Inputs in = MakeInputs(s, dt);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.dqk));
  const std::string what = std::string(DTypeName(dt)) + " batch " + std::to_string(s.batch) +
                           " seq " + std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
                           " dqk " + std::to_string(s.dqk) + " dv " + std::to_string(s.dv);
  Tensor out = Poisoned(in.v.shape(), dt), lse = Poisoned({s.batch * s.heads * s.seq}, dt);
  AttentionForward(in.q, in.k, in.v, s.batch, s.seq, s.heads, scale, out, lse);
  Tensor dq = Poisoned(in.q.shape(), dt), dk = Poisoned(in.k.shape(), dt),
         dv = Poisoned(in.v.shape(), dt);
  AttentionBackward(in.q, in.k, in.v, out, in.dout, lse, s.batch, s.seq, s.heads, scale, dq, dk,
                    dv);

  Tensor m_out = Poisoned(in.v.shape(), dt),
         probs = Poisoned({s.batch * s.heads, s.seq, s.seq}, dt);
  MaterializedAttentionForward(in.q, in.k, in.v, s.batch, s.seq, s.heads, scale, m_out, probs);
  Tensor m_dq = Poisoned(in.q.shape(), dt), m_dk = Poisoned(in.k.shape(), dt),
         m_dv = Poisoned(in.v.shape(), dt);
  MaterializedAttentionBackward(in.q, in.k, in.v, probs, in.dout, s.batch, s.seq, s.heads, scale,
                                m_dq, m_dk, m_dv);

  EXPECT_TRUE(AllClose(m_out, out, tol, tol)) << "out, " << what;
  EXPECT_TRUE(AllClose(m_dq, dq, tol, tol)) << "dq, " << what;
  EXPECT_TRUE(AllClose(m_dk, dk, tol, tol)) << "dk, " << what;
  EXPECT_TRUE(AllClose(m_dv, dv, tol, tol)) << "dv, " << what;
}

TEST(MaterializedAttention, MatchesTheTiledKernelForwardAndBackward) {
  // Lengths around the tiled kernel's 64-row tiles; d_qk != d_v as MLA (192/128 scaled down).
  for (const Shape& s :
       {Shape{2, 37, 3, 10, 10}, Shape{1, 64, 1, 8, 8}, Shape{2, 65, 2, 12, 6},
        Shape{1, 130, 4, 24, 16}, Shape{1, 1, 2, 4, 4}, Shape{1, 200, 2, 48, 32}}) {
    CheckAgainstFlash(s, DType::kF64, 1e-10);
    CheckAgainstFlash(s, DType::kF32, 1e-5);
  }
}

TEST(MaterializedAttention, KeepsACausalSoftmax) {
  const Shape s{2, 33, 3, 8, 5};
  const Inputs in = MakeInputs(s, DType::kF64);
  Tensor out = Tensor::Empty(in.v.shape(), DType::kF64),
         probs = Poisoned({s.batch * s.heads, s.seq, s.seq}, DType::kF64);
  MaterializedAttentionForward(in.q, in.k, in.v, s.batch, s.seq, s.heads, 0.3, out, probs);
  const double* p = probs.data<double>();
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    for (int64_t i = 0; i < s.seq; ++i) {
      const double* row = p + (bh * s.seq + i) * s.seq;
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += row[j];
      ASSERT_NEAR(sum, 1.0, 1e-12) << "row " << i << " of pair " << bh;
      for (int64_t j = i + 1; j < s.seq; ++j)
        ASSERT_EQ(row[j], 0.0) << "above the diagonal at (" << i << ", " << j << ")";
    }
  }
  EXPECT_EQ(MaterializedAttentionProbsBytes(s.batch, s.seq, s.heads, DType::kF64),
            static_cast<size_t>(s.batch * s.heads * s.seq * s.seq) * 8);
  EXPECT_EQ(MaterializedAttentionProbsBytes(1, 4096, 16, DType::kBF16),
            size_t{16} * 4096 * 4096 * 4);  // f32 probs
}

// bf16 inputs run the f32 path on rounded copies (the CPU's bf16 convention): bitwise the f32 call
// on the rounded inputs, rounded back; the probabilities stay f32.
TEST(MaterializedAttention, Bf16IsTheFp32PathOnRoundedInputs) {
  const Shape s{1, 40, 2, 16, 8};
  const Inputs in = MakeInputs(s, DType::kF32);
  auto bf = [](const Tensor& x) {
    Tensor y = Tensor::Empty(x.shape(), DType::kBF16);
    Convert(x, y);
    return y;
  };
  auto f32 = [](const Tensor& x) {
    Tensor y = Tensor::Empty(x.shape(), DType::kF32);
    Convert(x, y);
    return y;
  };
  const Tensor q16 = bf(in.q), k16 = bf(in.k), v16 = bf(in.v), g16 = bf(in.dout);
  Tensor out16 = Tensor::Empty(in.v.shape(), DType::kBF16),
         p16 = Tensor::Empty({s.heads, s.seq, s.seq}, DType::kF32);
  MaterializedAttentionForward(q16, k16, v16, 1, s.seq, s.heads, 0.25, out16, p16);
  Tensor dq16 = Tensor::Empty(in.q.shape(), DType::kBF16),
         dk16 = Tensor::Empty(in.k.shape(), DType::kBF16);
  Tensor dv16 = Tensor::Empty(in.v.shape(), DType::kBF16);
  MaterializedAttentionBackward(q16, k16, v16, p16, g16, 1, s.seq, s.heads, 0.25, dq16, dk16, dv16);

  const Tensor q = f32(q16), k = f32(k16), v = f32(v16), g = f32(g16);
  Tensor out = Tensor::Empty(in.v.shape(), DType::kF32),
         p = Tensor::Empty({s.heads, s.seq, s.seq}, DType::kF32);
  MaterializedAttentionForward(q, k, v, 1, s.seq, s.heads, 0.25, out, p);
  Tensor dq = Tensor::Empty(in.q.shape(), DType::kF32),
         dk = Tensor::Empty(in.k.shape(), DType::kF32);
  Tensor dv = Tensor::Empty(in.v.shape(), DType::kF32);
  MaterializedAttentionBackward(q, k, v, p, g, 1, s.seq, s.heads, 0.25, dq, dk, dv);
  for (const auto& [got, want, name] : {std::tuple{out16, out, "out"}, std::tuple{dq16, dq, "dq"},
                                        std::tuple{dk16, dk, "dk"}, std::tuple{dv16, dv, "dv"}}) {
    const Tensor rounded = bf(want);
    for (int64_t i = 0; i < rounded.numel(); ++i) {
      ASSERT_EQ(got.data<BFloat16>()[i].bits, rounded.data<BFloat16>()[i].bits)
          << name << " at " << i;
    }
  }
  EXPECT_TRUE(AllClose(p16, p, 0, 0)) << "probabilities";
}

TEST(MaterializedAttention, RefusesMisshapedProbabilities) {
  const Shape s{1, 9, 2, 4, 4};
  const Inputs in = MakeInputs(s, DType::kF32);
  Tensor out = Tensor::Empty(in.v.shape(), DType::kF32),
         probs = Tensor::Empty({s.heads, s.seq, s.seq - 1}, DType::kF32);
  EXPECT_DEATH(
      MaterializedAttentionForward(in.q, in.k, in.v, s.batch, s.seq, s.heads, 0.5, out, probs),
      "probs");
}

}  // namespace
}  // namespace moe::kernels
