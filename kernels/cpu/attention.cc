// The CPU causal attention: one (sequence, head) pair per task, the probabilities materialised.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gemm.h"

namespace moe::kernels::cpu {

void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
                      const Tensor& out, const Tensor& probs) {
  if (HasBf16({&qkv, &out, &probs})) {
    Bf16Scope s;
    AttentionForward(s.In(qkv), batch, seq_len, heads, head_dim, s.Out(out), s.Out(probs));
    return;
  }
  const int64_t s = seq_len, d = head_dim, hd = heads * head_dim, width = 3 * hd;
  MOE_CPU_FLOAT_DISPATCH(qkv.dtype(), T, {
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    const T* base = qkv.data<T>();
    T* o = out.data<T>();
    T* pr = probs.data<T>();
    // One (sequence, head) pair per task; the GEMMs inside run single-threaded (OpenBLAS's OpenMP
    // build does so inside a parallel region), so the pairs are the parallelism.
    ParallelFor(batch * heads, s * s * d, [&](int64_t b0, int64_t b1) {
      for (int64_t bh = b0; bh < b1; ++bh) {
        const int64_t b = bh / heads, h = bh % heads;
        const T* q = base + b * s * width + h * d;
        const T* k = q + hd;
        const T* v = q + 2 * hd;
        T* p = pr + bh * s * s;
        Gemm<T>(false, true, s, s, d, scale, q, width, k, width, T(0), p, s);
        for (int64_t i = 0; i < s; ++i) {
          T* row = p + i * s;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
          T sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
          }
          const T inv = T(1) / sum;
          for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
          for (int64_t j = i + 1; j < s; ++j) row[j] = 0;
        }
        Gemm<T>(false, false, s, d, s, T(1), p, s, v, width, T(0), o + b * s * hd + h * d, hd);
      }
    });
  });
}

void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv) {
  if (HasBf16({&qkv, &probs, &dout, &dqkv})) {
    Bf16Scope s;
    AttentionBackward(s.In(qkv), s.In(probs), s.In(dout), batch, seq_len, heads, head_dim, s.Out(dqkv));
    return;
  }
  const int64_t s = seq_len, d = head_dim, hd = heads * head_dim, width = 3 * hd;
  MOE_CPU_FLOAT_DISPATCH(qkv.dtype(), T, {
    const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
    const T* base = qkv.data<T>();
    const T* go = dout.data<T>();
    const T* pr = probs.data<T>();
    T* dbase = dqkv.data<T>();
    ParallelFor(batch * heads, 2 * s * s * d, [&](int64_t b0, int64_t b1) {
      std::vector<T> dp(static_cast<size_t>(s * s));
      for (int64_t bh = b0; bh < b1; ++bh) {
        const int64_t b = bh / heads, h = bh % heads;
        const T* q = base + b * s * width + h * d;
        const T* k = q + hd;
        const T* v = q + 2 * hd;
        const T* p = pr + bh * s * s;
        const T* g = go + b * s * hd + h * d;
        T* dq = dbase + b * s * width + h * d;
        T* dk = dq + hd;
        T* dv = dq + 2 * hd;
        // dV = P^T dO
        Gemm<T>(true, false, s, d, s, T(1), p, s, g, hd, T(0), dv, width);
        // dP = dO V^T
        Gemm<T>(false, true, s, s, d, T(1), g, hd, v, width, T(0), dp.data(), s);
        // dS = P * (dP - rowsum(P * dP)), scaled for the q k^T product
        for (int64_t i = 0; i < s; ++i) {
          const T* prow = p + i * s;
          T* drow = dp.data() + i * s;
          T dot = 0;
          for (int64_t j = 0; j <= i; ++j) dot += prow[j] * drow[j];
          for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
          for (int64_t j = i + 1; j < s; ++j) drow[j] = 0;
        }
        // dQ = dS K ; dK = dS^T Q
        Gemm<T>(false, false, s, d, s, T(1), dp.data(), s, k, width, T(0), dq, width);
        Gemm<T>(true, false, s, d, s, T(1), dp.data(), s, q, width, T(0), dk, width);
      }
    });
  });
}

}  // namespace moe::kernels::cpu
