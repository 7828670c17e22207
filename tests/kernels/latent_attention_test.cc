// The latent decoding attention against MLA's attention written out per head with the keys and
// values up-projected (the form training uses), in double: absorbing W_uk into the query and W_uv
// into the output gives the same result; causal over the cache for a prefill of several queries;
// bf16 within its rounding.
#include "kernels/latent_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

// Heads' outputs the long way: k_h[t] = [W_uk_h c_t; k_r_t], v_h[t] = W_uv_h c_t, q_h = [q_nope_h;
// q_rope_h], softmax over t <= position of q_h . k_h[t] * scale, then sum of v_h[t].
//   q_nope [n, H, dn], q_rope [n, H, dr], c [T, r], k_r [T, dr], w_uk [H, dn, r], w_uv [H, dv, r]
std::vector<double> LongWay(const std::vector<double>& q_nope, const std::vector<double>& q_rope,
                            const std::vector<double>& c, const std::vector<double>& k_r,
                            const std::vector<double>& w_uk, const std::vector<double>& w_uv,
                            int64_t n, int64_t total, int64_t heads, int64_t dn, int64_t dr,
                            int64_t r, int64_t dv, double scale) {
  std::vector<double> out(static_cast<size_t>(n * heads * dv), 0.0);
  auto at = [](const std::vector<double>& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t visible = total - n + i + 1;
      std::vector<double> s(static_cast<size_t>(visible));
      double mx = -1e300;
      for (int64_t t = 0; t < visible; ++t) {
        double dot = 0;
        for (int64_t a = 0; a < dn; ++a) {
          double k = 0;
          for (int64_t b = 0; b < r; ++b) k += at(w_uk, (h * dn + a) * r + b) * at(c, t * r + b);
          dot += at(q_nope, (i * heads + h) * dn + a) * k;
        }
        for (int64_t a = 0; a < dr; ++a)
          dot += at(q_rope, (i * heads + h) * dr + a) * at(k_r, t * dr + a);
        s[static_cast<size_t>(t)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int64_t t = 0; t < visible; ++t) {
        for (int64_t a = 0; a < dv; ++a) {
          double v = 0;
          for (int64_t b = 0; b < r; ++b) v += at(w_uv, (h * dv + a) * r + b) * at(c, t * r + b);
          out[static_cast<size_t>((i * heads + h) * dv + a)] += s[static_cast<size_t>(t)] / z * v;
        }
      }
    }
  }
  return out;
}

void CheckAgainstTheLongWay(DType dtype, double tol) {
  const int64_t n = 4, total = 11, heads = 3, dn = 5, dr = 4, r = 7, dv = 6;
  const double scale = 0.37;
  auto vals = [](const Tensor::Shape& shape, uint64_t seed) {
    return Values(RandomTensor(shape, seed));
  };
  const auto q_nope = vals({n * heads * dn}, 1), q_rope = vals({n * heads * dr}, 2),
             c = vals({total * r}, 3), k_r = vals({total * dr}, 4),
             w_uk = vals({heads * dn * r}, 5), w_uv = vals({heads * dv * r}, 6);
  // The absorbed form: q_abs[i, h] = [q_nope . W_uk_h; q_rope], cache rows [c_t; k_r_t].
  Tensor q = Tensor::Empty({n, heads * (r + dr)}, DType::kF64),
         cache = Tensor::Empty({total, r + dr}, DType::kF64);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      double* row = q.data<double>() + i * heads * (r + dr) + h * (r + dr);
      for (int64_t b = 0; b < r; ++b) {
        double x = 0;
        for (int64_t a = 0; a < dn; ++a)
          x += q_nope[static_cast<size_t>((i * heads + h) * dn + a)] *
               w_uk[static_cast<size_t>((h * dn + a) * r + b)];
        row[b] = x;
      }
      for (int64_t a = 0; a < dr; ++a)
        row[r + a] = q_rope[static_cast<size_t>((i * heads + h) * dr + a)];
    }
  }
  for (int64_t t = 0; t < total; ++t) {
    for (int64_t b = 0; b < r; ++b)
      cache.data<double>()[t * (r + dr) + b] = c[static_cast<size_t>(t * r + b)];
    for (int64_t a = 0; a < dr; ++a)
      cache.data<double>()[t * (r + dr) + r + a] = k_r[static_cast<size_t>(t * dr + a)];
  }
  Tensor qd = q, cd = cache;
  if (dtype != DType::kF64) {
    qd = Tensor::Empty(q.shape(), dtype);
    cd = Tensor::Empty(cache.shape(), dtype);
    Convert(q, qd);
    Convert(cache, cd);
  }
  Tensor latent = Tensor::Empty({n, heads * r}, dtype);
  Poison(latent);
  LatentAttentionDecode(qd, cd, heads, r, scale, latent);
  Tensor l64 = Tensor::Empty(latent.shape(), DType::kF64);
  Convert(latent, l64);
  // Then W_uv per head.
  const auto want =
      LongWay(q_nope, q_rope, c, k_r, w_uk, w_uv, n, total, heads, dn, dr, r, dv, scale);
  double worst = 0, top = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t a = 0; a < dv; ++a) {
        double got = 0;
        for (int64_t b = 0; b < r; ++b)
          got += w_uv[static_cast<size_t>((h * dv + a) * r + b)] *
                 l64.data<double>()[(i * heads + h) * r + b];
        const double w = want[static_cast<size_t>((i * heads + h) * dv + a)];
        worst = std::max(worst, std::fabs(got - w));
        top = std::max(top, std::fabs(w));
      }
    }
  }
  EXPECT_LE(worst, tol * top) << DTypeName(dtype) << ": worst " << worst << " of " << top;
}

TEST(LatentAttention, AbsorbedEqualsTheHeadsWrittenOut) {
  CheckAgainstTheLongWay(DType::kF64, 1e-12);
  CheckAgainstTheLongWay(DType::kF32, 1e-5);
  CheckAgainstTheLongWay(DType::kBF16, 2e-2);
}

// A query sees the rows up to its own position only: changing later rows changes nothing for it.
TEST(LatentAttention, IsCausalOverTheCache) {
  const int64_t n = 3, total = 8, heads = 2, d = 6, dv = 4;
  Tensor q = RandomTensor({n, heads * d}, 7), cache = RandomTensor({total, d}, 8);
  Tensor a = Tensor::Empty({n, heads * dv}, DType::kF64), b = a.Clone();
  LatentAttentionDecode(q, cache, heads, dv, 0.5, a);
  for (int64_t c = 0; c < d; ++c) cache.data<double>()[(total - 1) * d + c] += 3.0;  // the last row
  LatentAttentionDecode(q, cache, heads, dv, 0.5, b);
  const auto va = Values(a), vb = Values(b);
  for (int64_t i = 0; i < (n - 1) * heads * dv; ++i)
    EXPECT_EQ(va[static_cast<size_t>(i)], vb[static_cast<size_t>(i)]) << "query before the last";
  bool changed = false;
  for (int64_t i = (n - 1) * heads * dv; i < n * heads * dv; ++i)
    changed |= va[static_cast<size_t>(i)] != vb[static_cast<size_t>(i)];
  EXPECT_TRUE(changed) << "the last query sees the last row";
}

}  // namespace
}  // namespace moe::kernels
