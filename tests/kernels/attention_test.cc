// The tiled (flash-style) causal attention against a materialised reference in double, its backward
// against finite differences, with d_qk != d_v, tile-crossing lengths, one and many heads.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

struct Shape {
  int64_t batch, seq, heads, dqk, dv;
};

// softmax(q k^T * scale, causal) v with the [S, S] scores materialised, one (sequence, head) at a
// time.
std::vector<double> RefAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Shape& s,
                                 double scale, std::vector<double>* lse) {
  const auto qv = Values(q), kv = Values(k), vv = Values(v);
  std::vector<double> out(static_cast<size_t>(s.batch * s.seq * s.heads * s.dv));
  lse->assign(static_cast<size_t>(s.batch * s.heads * s.seq), 0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> sc(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.dqk; ++c) {
            dot += qv[static_cast<size_t>(((b * s.seq + i) * s.heads + h) * s.dqk + c)] *
                   kv[static_cast<size_t>(((b * s.seq + j) * s.heads + h) * s.dqk + c)];
          }
          sc[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        (*lse)[static_cast<size_t>((b * s.heads + h) * s.seq + i)] = mx + std::log(sum);
        for (int64_t c = 0; c < s.dv; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) {
            o += sc[static_cast<size_t>(j)] / sum *
                 vv[static_cast<size_t>(((b * s.seq + j) * s.heads + h) * s.dv + c)];
          }
          out[static_cast<size_t>(((b * s.seq + i) * s.heads + h) * s.dv + c)] = o;
        }
      }
  return out;
}

void CheckForward(const Shape& s, DType dt, double tol) {
  const int64_t t = s.batch * s.seq;
  Tensor q = RandomTensor({t, s.heads * s.dqk}, 1, dt, -2, 2),
         k = RandomTensor({t, s.heads * s.dqk}, 2, dt, -2, 2);
  Tensor v = RandomTensor({t, s.heads * s.dv}, 3, dt);
  Tensor out = Tensor::Empty({t, s.heads * s.dv}, dt),
         lse = Tensor::Empty({s.batch * s.heads * s.seq}, dt);
  Poison(out);
  Poison(lse);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.dqk));
  AttentionForward(q, k, v, s.batch, s.seq, s.heads, scale, out, lse);
  std::vector<double> ref_lse;
  EXPECT_TRUE(AllClose(out, RefAttention(q, k, v, s, scale, &ref_lse), tol, tol))
      << DTypeName(dt) << " seq " << s.seq << " heads " << s.heads << " dqk " << s.dqk << " dv "
      << s.dv;
  EXPECT_TRUE(AllClose(lse, ref_lse, tol, tol)) << "lse";
}

TEST(Attention, ForwardMatchesTheMaterialisedReference) {
  // Lengths around the 64-row tiles; d_qk != d_v as MLA; one head and several.
  for (const Shape& s : {Shape{3, 37, 3, 10, 10}, Shape{1, 64, 1, 8, 8}, Shape{2, 65, 2, 12, 6},
                         Shape{1, 130, 4, 24, 16}, Shape{1, 1, 2, 4, 4}}) {
    CheckForward(s, DType::kF64, 1e-12);
    CheckForward(s, DType::kF32, 2e-5);
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  // Two tiles in each direction (seq 70), d_qk != d_v.
  for (const Shape& s : {Shape{2, 5, 2, 4, 4}, Shape{1, 70, 2, 6, 3}}) {
    const int64_t t = s.batch * s.seq;
    Tensor q = RandomTensor({t, s.heads * s.dqk}, 4, DType::kF64, -1.5, 1.5);
    Tensor k = RandomTensor({t, s.heads * s.dqk}, 5, DType::kF64, -1.5, 1.5);
    Tensor v = RandomTensor({t, s.heads * s.dv}, 6);
    Tensor g = RandomTensor({t, s.heads * s.dv}, 7);
    Tensor out = Tensor::Empty({t, s.heads * s.dv}, DType::kF64),
           lse = Tensor::Empty({s.batch * s.heads * s.seq}, DType::kF64);
    const double scale = 0.7;
    auto loss = [&] {
      AttentionForward(q, k, v, s.batch, s.seq, s.heads, scale, out, lse);
      return Dot(out, g);
    };
    loss();
    Tensor dq = Tensor::Empty(q.shape(), DType::kF64), dk = Tensor::Empty(k.shape(), DType::kF64);
    Tensor dv = Tensor::Empty(v.shape(), DType::kF64);
    Poison(dq);
    Poison(dk);
    Poison(dv);
    AttentionBackward(q, k, v, out, g, lse, s.batch, s.seq, s.heads, scale, dq, dk, dv);
    EXPECT_TRUE(GradientMatches(loss, q, dq)) << "dq, seq " << s.seq;
    EXPECT_TRUE(GradientMatches(loss, k, dk)) << "dk, seq " << s.seq;
    EXPECT_TRUE(GradientMatches(loss, v, dv)) << "dv, seq " << s.seq;
  }
}

TEST(Attention, Bf16IsTheFp32KernelOnRoundedInputs) {
  const Shape s{1, 40, 2, 16, 8};
  const int64_t t = s.batch * s.seq;
  Tensor q = RandomTensor({t, s.heads * s.dqk}, 8, DType::kF32),
         k = RandomTensor({t, s.heads * s.dqk}, 9, DType::kF32);
  Tensor v = RandomTensor({t, s.heads * s.dv}, 10, DType::kF32);
  auto bf = [](const Tensor& x) {
    Tensor y = Tensor::Empty(x.shape(), DType::kBF16);
    Convert(x, y);
    return y;
  };
  Tensor out16 = Tensor::Empty({t, s.heads * s.dv}, DType::kBF16),
         lse = Tensor::Empty({t * s.heads}, DType::kF32);
  AttentionForward(bf(q), bf(k), bf(v), s.batch, s.seq, s.heads, 0.25, out16, lse);
  Tensor out32 = Tensor::Empty({t, s.heads * s.dv}, DType::kF32),
         lse32 = Tensor::Empty({t * s.heads}, DType::kF32);
  Tensor q32 = Tensor::Empty(q.shape(), DType::kF32), k32 = Tensor::Empty(k.shape(), DType::kF32);
  Tensor v32 = Tensor::Empty(v.shape(), DType::kF32);
  Convert(bf(q), q32);
  Convert(bf(k), k32);
  Convert(bf(v), v32);
  AttentionForward(q32, k32, v32, s.batch, s.seq, s.heads, 0.25, out32, lse32);
  Tensor rounded = bf(out32);
  const BFloat16* a = rounded.data<BFloat16>();
  const BFloat16* b = out16.data<BFloat16>();
  for (int64_t i = 0; i < rounded.numel(); ++i)
    ASSERT_EQ(a[i].bits, b[i].bits) << "bf16 = the fp32 kernel, outputs rounded; at " << i;
}

}  // namespace
}  // namespace moe::kernels
