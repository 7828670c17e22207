// The CPU latent decoding attention: per (query, head), the scores over the visible cache rows, a
// softmax, the weighted sum of the rows' first dv values; in the accumulation type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

template <typename T>
void Decode(const Tensor& q, const Tensor& cache, int64_t heads, int64_t dv, double scale,
            const Tensor& out) {
  const int64_t n = q.dim(0), total = cache.dim(0), d = cache.dim(1);
  const T* qp = q.data<T>();
  const T* c = cache.data<T>();
  T* o = out.data<T>();
  ParallelFor(n * heads, total * (d + dv), [&](int64_t b, int64_t e) {
    std::vector<T> p(static_cast<size_t>(total));
    for (int64_t ih = b; ih < e; ++ih) {
      const int64_t i = ih / heads, h = ih % heads, visible = total - n + i + 1;
      const T* qi = qp + i * heads * d + h * d;
      T mx = -std::numeric_limits<T>::infinity();
      for (int64_t t = 0; t < visible; ++t) {
        T s = 0;
        for (int64_t k = 0; k < d; ++k) s += qi[k] * c[t * d + k];
        p[static_cast<size_t>(t)] = s * static_cast<T>(scale);
        mx = std::max(mx, p[static_cast<size_t>(t)]);
      }
      T sum = 0;
      for (int64_t t = 0; t < visible; ++t) {
        p[static_cast<size_t>(t)] = std::exp(p[static_cast<size_t>(t)] - mx);
        sum += p[static_cast<size_t>(t)];
      }
      T* oi = o + i * heads * dv + h * dv;
      for (int64_t k = 0; k < dv; ++k) oi[k] = 0;
      for (int64_t t = 0; t < visible; ++t) {
        const T w = p[static_cast<size_t>(t)] / sum;
        for (int64_t k = 0; k < dv; ++k) oi[k] += w * c[t * d + k];
      }
    }
  });
}

}  // namespace

void LatentAttentionDecode(const Tensor& q, const Tensor& cache, int64_t heads, int64_t dv,
                           double scale, const Tensor& out) {
  if (HasBf16({&q, &cache, &out})) {
    Bf16Scope s;
    LatentAttentionDecode(s.In(q), s.In(cache), heads, dv, scale, s.Out(out));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(q.dtype(), T, Decode<T>(q, cache, heads, dv, scale, out));
}

}  // namespace moe::kernels::cpu
