// The CPU materialised causal attention (kernels/attention_materialized.h): one (sequence, head)
// pair per task, full [S, S] GEMMs (BLAS runs single-threaded inside the parallel region), the
// softmax and its backward row by row. Nothing is skipped above the diagonal: that is the textbook
// path's cost.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/common.h"
#include "kernels/cpu_gemm.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

// Offsets of one (sequence, head) pair in the token-major inputs: row s of q is q + qk + s * qk_ld.
struct PairOffsets {
  int64_t qk, v, qk_ld, v_ld;
};

PairOffsets OffsetsOf(int64_t bh, int64_t seq, int64_t heads, int64_t dqk, int64_t dv) {
  const int64_t b = bh / heads, h = bh % heads;
  return {b * seq * heads * dqk + h * dqk, b * seq * heads * dv + h * dv, heads * dqk, heads * dv};
}

// Row-wise causal softmax of p [seq, seq] in place; zero above the diagonal.
template <typename T>
void CausalSoftmax(T* p, int64_t seq) {
  for (int64_t i = 0; i < seq; ++i) {
    T* row = p + i * seq;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
    T sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
    const T inv = T(1) / sum;
    for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
    std::fill(row + i + 1, row + seq, T(0));
  }
}

// dP [seq, seq] -> dS = P (dP - rowsum(P dP)) scale in place; zero above the diagonal.
template <typename T>
void SoftmaxBackward(const T* p, T* dp, int64_t seq, T scale) {
  for (int64_t i = 0; i < seq; ++i) {
    const T* prow = p + i * seq;
    T* drow = dp + i * seq;
    T dot = 0;
    for (int64_t j = 0; j <= i; ++j) dot += prow[j] * drow[j];
    for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
    std::fill(drow + i + 1, drow + seq, T(0));
  }
}

template <typename T>
void Forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq,
             int64_t heads, double scale, const Tensor& out, const Tensor& probs) {
  const int64_t dqk = q.dim(1) / heads, dv = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  ParallelFor(batch * heads, seq * seq * (dqk + dv), [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      const PairOffsets o = OffsetsOf(bh, seq, heads, dqk, dv);
      const T* qh = q.data<T>() + o.qk;
      const T* kh = k.data<T>() + o.qk;
      T* p = probs.data<T>() + bh * seq * seq;
      Gemm<T>(false, true, seq, seq, dqk, sc, qh, o.qk_ld, kh, o.qk_ld, T(0), p,
              seq);  // S = q k^T scale
      CausalSoftmax(p, seq);
      Gemm<T>(false, false, seq, dv, seq, T(1), p, seq, v.data<T>() + o.v, o.v_ld, T(0),
              out.data<T>() + o.v, o.v_ld);
    }
  });
}

template <typename T>
void Backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
              const Tensor& dout, int64_t batch, int64_t seq, int64_t heads, double scale,
              const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t dqk = q.dim(1) / heads, dvd = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  // dP, then dS in place: [B*H, S, S], as large as the probabilities.
  const Tensor ds = Tensor::Empty({batch * heads, seq, seq}, probs.dtype());
  ParallelFor(batch * heads, 2 * seq * seq * (dqk + dvd), [&](int64_t b0, int64_t b1) {
    for (int64_t bh = b0; bh < b1; ++bh) {
      const PairOffsets o = OffsetsOf(bh, seq, heads, dqk, dvd);
      const T* p = probs.data<T>() + bh * seq * seq;
      const T* g = dout.data<T>() + o.v;
      T* d = ds.data<T>() + bh * seq * seq;
      Gemm<T>(true, false, seq, dvd, seq, T(1), p, seq, g, o.v_ld, T(0), dv.data<T>() + o.v,
              o.v_ld);  // dV = P^T dO
      Gemm<T>(false, true, seq, seq, dvd, T(1), g, o.v_ld, v.data<T>() + o.v, o.v_ld, T(0), d,
              seq);  // dP = dO V^T
      SoftmaxBackward(p, d, seq, sc);
      Gemm<T>(false, false, seq, dqk, seq, T(1), d, seq, k.data<T>() + o.qk, o.qk_ld, T(0),
              dq.data<T>() + o.qk,
              o.qk_ld);  // dQ = dS K
      Gemm<T>(true, false, seq, dqk, seq, T(1), d, seq, q.data<T>() + o.qk, o.qk_ld, T(0),
              dk.data<T>() + o.qk,
              o.qk_ld);  // dK = dS^T Q
    }
  });
}

}  // namespace

void MaterializedAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                                  int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                                  const Tensor& probs) {
  if (HasBf16({&q, &k, &v, &out})) {
    Bf16Scope s;
    MaterializedAttentionForward(s.In(q), s.In(k), s.In(v), batch, seq_len, heads, scale,
                                 s.Out(out), probs);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(q.dtype(), T,
                         Forward<T>(q, k, v, batch, seq_len, heads, scale, out, probs));
}

void MaterializedAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& probs, const Tensor& dout, int64_t batch,
                                   int64_t seq_len, int64_t heads, double scale, const Tensor& dq,
                                   const Tensor& dk, const Tensor& dv) {
  if (HasBf16({&q, &k, &v, &dout, &dq, &dk, &dv})) {
    Bf16Scope s;
    MaterializedAttentionBackward(s.In(q), s.In(k), s.In(v), probs, s.In(dout), batch, seq_len,
                                  heads, scale, s.Out(dq), s.Out(dk), s.Out(dv));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(
      q.dtype(), T, Backward<T>(q, k, v, probs, dout, batch, seq_len, heads, scale, dq, dk, dv));
}

}  // namespace moe::kernels::cpu
