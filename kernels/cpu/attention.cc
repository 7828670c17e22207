// The CPU causal attention, tiled with an online softmax (FlashAttention's algorithm, forward and
// backward): one (sequence, head) pair per task, tiles of kBlock queries by kBlock keys, no [S, S]
// matrix. The tile products are GEMMs (BLAS runs single-threaded inside the parallel region, so the
// pairs are the parallelism); the softmax work is elementwise. Each task owns its outputs' rows, so
// the backward needs no atomics and the result depends only on the tile size (fixed), not on
// threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu_gemm.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;

// Strided views of one (sequence, head) pair: row s of q is q + s * qk_ld, and so on.
template <typename T>
struct HeadView {
  const T* q;
  const T* k;
  const T* v;
  int64_t qk_ld, v_ld, dqk, dv, seq;
};

template <typename T>
HeadView<T> ViewOf(const T* q, const T* k, const T* v, int64_t b, int64_t h, int64_t seq,
                   int64_t heads, int64_t dqk, int64_t dv) {
  const int64_t qk_ld = heads * dqk, v_ld = heads * dv;
  return {q + b * seq * qk_ld + h * dqk,
          k + b * seq * qk_ld + h * dqk,
          v + b * seq * v_ld + h * dv,
          qk_ld,
          v_ld,
          dqk,
          dv,
          seq};
}

// s [rows, kBlock] = q[i0:i1] k[j0:j1]^T * scale, -inf above the diagonal.
template <typename T>
void Scores(const HeadView<T>& hv, int64_t i0, int64_t i1, int64_t j0, int64_t j1, T scale, T* s) {
  Gemm<T>(false, true, i1 - i0, j1 - j0, hv.dqk, scale, hv.q + i0 * hv.qk_ld, hv.qk_ld,
          hv.k + j0 * hv.qk_ld, hv.qk_ld, T(0), s, kBlock);
  if (j1 - 1 <= i0) return;  // wholly at or below the diagonal
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = std::max(j0, i + 1); j < j1; ++j)
      s[(i - i0) * kBlock + (j - j0)] = -std::numeric_limits<T>::infinity();
  }
}

// One query block: the online softmax over the key blocks up to the diagonal.
template <typename T>
void ForwardBlock(const HeadView<T>& hv, int64_t i0, int64_t i1, T scale, T* out, int64_t out_ld,
                  T* lse, std::vector<T>& s, std::vector<T>& acc) {
  const int64_t rows = i1 - i0;
  std::vector<T> m(static_cast<size_t>(rows), -std::numeric_limits<T>::infinity()),
      l(static_cast<size_t>(rows), T(0));
  std::fill(acc.begin(), acc.begin() + rows * hv.dv, T(0));
  for (int64_t j0 = 0; j0 < i1; j0 += kBlock) {  // tiles wholly above the diagonal are skipped
    const int64_t j1 = std::min(j0 + kBlock, hv.seq), cols = j1 - j0;
    Scores(hv, i0, i1, j0, j1, scale, s.data());
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s.data() + r * kBlock;
      T mx = m[static_cast<size_t>(r)];
      for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, row[j]);
      const T correction =
          std::exp(m[static_cast<size_t>(r)] - mx);  // exp(-inf) = 0 on the first tile
      T sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      l[static_cast<size_t>(r)] = l[static_cast<size_t>(r)] * correction + sum;
      m[static_cast<size_t>(r)] = mx;
      T* a = acc.data() + r * hv.dv;
      for (int64_t c = 0; c < hv.dv; ++c) a[c] *= correction;
    }
    // acc += P V[j0:j1]
    Gemm<T>(false, false, rows, hv.dv, cols, T(1), s.data(), kBlock, hv.v + j0 * hv.v_ld, hv.v_ld,
            T(1), acc.data(), hv.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[static_cast<size_t>(r)];
    T* o = out + (i0 + r) * out_ld;
    for (int64_t c = 0; c < hv.dv; ++c) o[c] = acc[static_cast<size_t>(r * hv.dv + c)] * inv;
    lse[i0 + r] = m[static_cast<size_t>(r)] + std::log(l[static_cast<size_t>(r)]);
  }
}

template <typename T>
void Forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq,
             int64_t heads, double scale, const Tensor& out, const Tensor& lse) {
  const int64_t dqk = q.dim(1) / heads, dv = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  ParallelFor(batch * heads, seq * seq * (dqk + dv) / 2, [&](int64_t b0, int64_t b1) {
    std::vector<T> s(static_cast<size_t>(kBlock * kBlock)), acc(static_cast<size_t>(kBlock * dv));
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const HeadView<T> hv =
          ViewOf(q.data<T>(), k.data<T>(), v.data<T>(), b, h, seq, heads, dqk, dv);
      T* o = out.data<T>() + b * seq * heads * dv + h * dv;
      T* l = lse.data<T>() + bh * seq;
      for (int64_t i0 = 0; i0 < seq; i0 += kBlock)
        ForwardBlock(hv, i0, std::min(i0 + kBlock, seq), sc, o, heads * dv, l, s, acc);
    }
  });
}

// Gradient outputs of one (sequence, head) pair (rows strided as the inputs).
template <typename T>
struct HeadGrads {
  T* dq;
  T* dk;
  T* dv;
  const T* out;
  const T* dout;
  const T* lse;
};

// Key block [j0, j1) against query block [i0, i1): P recomputed from lse; dV_j += P^T dO_i,
// dP = dO_i V_j^T, dS = P (dP - delta_i) scale, dQ_i += dS K_j, dK_j += dS^T Q_i.
template <typename T>
void BackwardTile(const HeadView<T>& hv, const HeadGrads<T>& g, const std::vector<T>& delta,
                  int64_t i0, int64_t i1, int64_t j0, int64_t j1, T scale, std::vector<T>& p,
                  std::vector<T>& dp) {
  const int64_t rows = i1 - i0, cols = j1 - j0;
  Scores(hv, i0, i1, j0, j1, scale, p.data());
  for (int64_t r = 0; r < rows; ++r) {
    T* row = p.data() + r * kBlock;
    for (int64_t j = 0; j < cols; ++j)
      row[j] = std::exp(row[j] - g.lse[i0 + r]);  // exp(-inf) = 0 above the diagonal
  }
  Gemm<T>(true, false, cols, hv.dv, rows, T(1), p.data(), kBlock, g.dout + i0 * hv.v_ld, hv.v_ld,
          T(1), g.dv + j0 * hv.v_ld, hv.v_ld);
  Gemm<T>(false, true, rows, cols, hv.dv, T(1), g.dout + i0 * hv.v_ld, hv.v_ld, hv.v + j0 * hv.v_ld,
          hv.v_ld, T(0), dp.data(), kBlock);
  for (int64_t r = 0; r < rows; ++r) {
    const T d = delta[static_cast<size_t>(i0 + r)];
    T* ds = dp.data() + r * kBlock;
    const T* pr = p.data() + r * kBlock;
    for (int64_t j = 0; j < cols; ++j) ds[j] = pr[j] * (ds[j] - d) * scale;
  }
  Gemm<T>(false, false, rows, hv.dqk, cols, T(1), dp.data(), kBlock, hv.k + j0 * hv.qk_ld, hv.qk_ld,
          T(1), g.dq + i0 * hv.qk_ld, hv.qk_ld);
  Gemm<T>(true, false, cols, hv.dqk, rows, T(1), dp.data(), kBlock, hv.q + i0 * hv.qk_ld, hv.qk_ld,
          T(1), g.dk + j0 * hv.qk_ld, hv.qk_ld);
}

template <typename T>
void Backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& dout, const Tensor& lse, int64_t batch, int64_t seq, int64_t heads,
              double scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t dqk = q.dim(1) / heads, dvd = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  for (const Tensor* t : {&dq, &dk, &dv}) std::fill(t->data<T>(), t->data<T>() + t->numel(), T(0));
  ParallelFor(batch * heads, seq * seq * (dqk + dvd) * 2, [&](int64_t b0, int64_t b1) {
    std::vector<T> p(static_cast<size_t>(kBlock * kBlock)),
        dp(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> delta(static_cast<size_t>(seq));
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const HeadView<T> hv =
          ViewOf(q.data<T>(), k.data<T>(), v.data<T>(), b, h, seq, heads, dqk, dvd);
      const int64_t qk_off = b * seq * heads * dqk + h * dqk,
                    v_off = b * seq * heads * dvd + h * dvd;
      const HeadGrads<T> g{dq.data<T>() + qk_off, dk.data<T>() + qk_off,  dv.data<T>() + v_off,
                           out.data<T>() + v_off, dout.data<T>() + v_off, lse.data<T>() + bh * seq};
      // delta_i = <dout_i, out_i>: the softmax backward's row term.
      for (int64_t i = 0; i < seq; ++i) {
        T d = 0;
        for (int64_t c = 0; c < dvd; ++c) d += g.dout[i * hv.v_ld + c] * g.out[i * hv.v_ld + c];
        delta[static_cast<size_t>(i)] = d;
      }
      for (int64_t j0 = 0; j0 < seq; j0 += kBlock) {
        for (int64_t i0 = j0; i0 < seq; i0 += kBlock) {
          BackwardTile(hv, g, delta, i0, std::min(i0 + kBlock, seq), j0, std::min(j0 + kBlock, seq),
                       sc, p, dp);
        }
      }
    }
  });
}

}  // namespace

void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                      int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                      const Tensor& lse) {
  if (HasBf16({&q, &k, &v, &out})) {
    Bf16Scope s;
    AttentionForward(s.In(q), s.In(k), s.In(v), batch, seq_len, heads, scale, s.Out(out),
                     s.Out(lse));
    return;
  }
  MOE_CHECK(lse.dtype() == q.dtype())
      << "AttentionForward: lse must be " << DTypeName(q.dtype()) << " for " << DTypeName(q.dtype())
      << " inputs, got " << DTypeName(lse.dtype());
  MOE_CPU_FLOAT_DISPATCH(q.dtype(), T, Forward<T>(q, k, v, batch, seq_len, heads, scale, out, lse));
}

void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t batch, int64_t seq_len,
                       int64_t heads, double scale, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv) {
  if (HasBf16({&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
    Bf16Scope s;
    AttentionBackward(s.In(q), s.In(k), s.In(v), s.In(out), s.In(dout), s.In(lse), batch, seq_len,
                      heads, scale, s.Out(dq), s.Out(dk), s.Out(dv));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(
      q.dtype(), T, Backward<T>(q, k, v, out, dout, lse, batch, seq_len, heads, scale, dq, dk, dv));
}

}  // namespace moe::kernels::cpu
