// The CPU causal attention, tiled with an online softmax (FlashAttention's algorithm, forward and
// backward): one (sequence, head) pair per task, tiles of kBlock queries by kBlock keys, no [S, S]
// matrix. Each task owns its outputs' rows, so the backward needs no atomics and the result depends
// only on the tile sizes (fixed), not on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moe::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;

// Strided views of one (sequence, head) pair: row s of q is q + s * q_ld, and so on.
template <typename T>
struct HeadView {
  const T* q;
  const T* k;
  const T* v;
  int64_t qk_ld, v_ld, dqk, dv, seq;
};

template <typename T>
HeadView<T> ViewOf(const T* q, const T* k, const T* v, int64_t b, int64_t h, int64_t seq, int64_t heads, int64_t dqk,
                   int64_t dv) {
  const int64_t qk_ld = heads * dqk, v_ld = heads * dv;
  return {q + b * seq * qk_ld + h * dqk, k + b * seq * qk_ld + h * dqk, v + b * seq * v_ld + h * dv, qk_ld, v_ld, dqk, dv,
          seq};
}

template <typename T>
T Dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// Scaled scores of queries [i0, i1) against keys [j0, j1) into s (row-major, width kBlock); -inf above
// the diagonal.
template <typename T>
void Scores(const HeadView<T>& hv, int64_t i0, int64_t i1, int64_t j0, int64_t j1, T scale, T* s) {
  for (int64_t i = i0; i < i1; ++i) {
    T* row = s + (i - i0) * kBlock;
    const T* qi = hv.q + i * hv.qk_ld;
    for (int64_t j = j0; j < j1; ++j) {
      row[j - j0] = j <= i ? Dot(qi, hv.k + j * hv.qk_ld, hv.dqk) * scale : -std::numeric_limits<T>::infinity();
    }
  }
}

// One query block: the online softmax over the key blocks up to the diagonal.
template <typename T>
void ForwardBlock(const HeadView<T>& hv, int64_t i0, int64_t i1, T scale, T* out, int64_t out_ld, T* lse,
                  std::vector<T>& s, std::vector<T>& acc) {
  const int64_t rows = i1 - i0;
  std::vector<T> m(static_cast<size_t>(rows), -std::numeric_limits<T>::infinity()), l(static_cast<size_t>(rows), T(0));
  std::fill(acc.begin(), acc.begin() + rows * hv.dv, T(0));
  for (int64_t j0 = 0; j0 < i1; j0 += kBlock) {  // tiles wholly above the diagonal are skipped
    const int64_t j1 = std::min(j0 + kBlock, hv.seq);
    Scores(hv, i0, i1, j0, j1, scale, s.data());
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s.data() + r * kBlock;
      T mx = m[static_cast<size_t>(r)];
      for (int64_t j = 0; j < j1 - j0; ++j) mx = std::max(mx, row[j]);
      const T correction = std::exp(m[static_cast<size_t>(r)] - mx);  // exp(-inf) = 0 on the first tile
      T sum = 0;
      for (int64_t j = 0; j < j1 - j0; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      l[static_cast<size_t>(r)] = l[static_cast<size_t>(r)] * correction + sum;
      m[static_cast<size_t>(r)] = mx;
      T* a = acc.data() + r * hv.dv;
      for (int64_t c = 0; c < hv.dv; ++c) a[c] *= correction;
      for (int64_t j = 0; j < j1 - j0; ++j) {
        const T p = row[j];
        if (p == T(0)) continue;
        const T* vj = hv.v + (j0 + j) * hv.v_ld;
        for (int64_t c = 0; c < hv.dv; ++c) a[c] += p * vj[c];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[static_cast<size_t>(r)];
    T* o = out + (i0 + r) * out_ld;
    for (int64_t c = 0; c < hv.dv; ++c) o[c] = acc[static_cast<size_t>(r * hv.dv + c)] * inv;
    lse[i0 + r] = m[static_cast<size_t>(r)] + std::log(l[static_cast<size_t>(r)]);
  }
}

template <typename T>
void Forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq, int64_t heads, double scale,
             const Tensor& out, const Tensor& lse) {
  const int64_t dqk = q.dim(1) / heads, dv = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  ParallelFor(batch * heads, seq * seq * (dqk + dv) / 2, [&](int64_t b0, int64_t b1) {
    std::vector<T> s(static_cast<size_t>(kBlock * kBlock)), acc(static_cast<size_t>(kBlock * dv));
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const HeadView<T> hv = ViewOf(q.data<T>(), k.data<T>(), v.data<T>(), b, h, seq, heads, dqk, dv);
      T* o = out.data<T>() + b * seq * heads * dv + h * dv;
      T* l = lse.data<T>() + bh * seq;
      for (int64_t i0 = 0; i0 < seq; i0 += kBlock) ForwardBlock(hv, i0, std::min(i0 + kBlock, seq), sc, o, heads * dv, l, s, acc);
    }
  });
}

// Gradient outputs of one (sequence, head) pair, with their row stride.
template <typename T>
struct HeadGrads {
  T* dq;
  T* dk;
  T* dv;
  const T* out;
  const T* dout;
  const T* lse;
};

// Key block [j0, j1): the probabilities recomputed from lse, tile by tile over the query blocks at and
// below the diagonal; dk and dv of the block, dq of every query block accumulated.
template <typename T>
void BackwardKeyBlock(const HeadView<T>& hv, const HeadGrads<T>& g, const std::vector<T>& delta, int64_t j0, int64_t j1,
                      T scale, std::vector<T>& p) {
  for (int64_t i0 = j0 / kBlock * kBlock; i0 < hv.seq; i0 += kBlock) {
    const int64_t i1 = std::min(i0 + kBlock, hv.seq);
    Scores(hv, i0, i1, j0, j1, scale, p.data());
    for (int64_t i = i0; i < i1; ++i) {
      T* row = p.data() + (i - i0) * kBlock;
      const T* doi = g.dout + i * hv.v_ld;
      const T* qi = hv.q + i * hv.qk_ld;
      T* dqi = g.dq + i * hv.qk_ld;
      for (int64_t j = j0; j < std::min(j1, i + 1); ++j) {
        const T pij = std::exp(row[j - j0] - g.lse[i]);
        const T* vj = hv.v + j * hv.v_ld;
        T* dvj = g.dv + j * hv.v_ld;
        for (int64_t c = 0; c < hv.dv; ++c) dvj[c] += pij * doi[c];
        const T ds = pij * (Dot(doi, vj, hv.dv) - delta[static_cast<size_t>(i)]) * scale;
        const T* kj = hv.k + j * hv.qk_ld;
        T* dkj = g.dk + j * hv.qk_ld;
        for (int64_t c = 0; c < hv.dqk; ++c) {
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
    }
  }
}

template <typename T>
void Backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout, const Tensor& lse,
              int64_t batch, int64_t seq, int64_t heads, double scale, const Tensor& dq, const Tensor& dk,
              const Tensor& dv) {
  const int64_t dqk = q.dim(1) / heads, dvd = v.dim(1) / heads;
  const T sc = static_cast<T>(scale);
  for (const Tensor* t : {&dq, &dk, &dv}) std::fill(t->data<T>(), t->data<T>() + t->numel(), T(0));
  ParallelFor(batch * heads, seq * seq * (dqk + dvd) * 2, [&](int64_t b0, int64_t b1) {
    std::vector<T> p(static_cast<size_t>(kBlock * kBlock)), delta(static_cast<size_t>(seq));
    for (int64_t bh = b0; bh < b1; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const HeadView<T> hv = ViewOf(q.data<T>(), k.data<T>(), v.data<T>(), b, h, seq, heads, dqk, dvd);
      const int64_t qk_off = b * seq * heads * dqk + h * dqk, v_off = b * seq * heads * dvd + h * dvd;
      const HeadGrads<T> g{dq.data<T>() + qk_off, dk.data<T>() + qk_off, dv.data<T>() + v_off,
                           out.data<T>() + v_off,  dout.data<T>() + v_off, lse.data<T>() + bh * seq};
      // delta_i = <dout_i, out_i>: the softmax backward's row term.
      for (int64_t i = 0; i < seq; ++i) delta[static_cast<size_t>(i)] = Dot(g.dout + i * hv.v_ld, g.out + i * hv.v_ld, dvd);
      for (int64_t j0 = 0; j0 < seq; j0 += kBlock) BackwardKeyBlock(hv, g, delta, j0, std::min(j0 + kBlock, seq), sc, p);
    }
  });
}

}  // namespace

void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len, int64_t heads,
                      double scale, const Tensor& out, const Tensor& lse) {
  if (HasBf16({&q, &k, &v, &out})) {
    Bf16Scope s;
    AttentionForward(s.In(q), s.In(k), s.In(v), batch, seq_len, heads, scale, s.Out(out), s.Out(lse));
    return;
  }
  MOE_CHECK(lse.dtype() == q.dtype()) << "AttentionForward: lse must be " << DTypeName(q.dtype()) << " for "
                                      << DTypeName(q.dtype()) << " inputs, got " << DTypeName(lse.dtype());
  MOE_CPU_FLOAT_DISPATCH(q.dtype(), T, Forward<T>(q, k, v, batch, seq_len, heads, scale, out, lse));
}

void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                       const Tensor& lse, int64_t batch, int64_t seq_len, int64_t heads, double scale, const Tensor& dq,
                       const Tensor& dk, const Tensor& dv) {
  if (HasBf16({&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
    Bf16Scope s;
    AttentionBackward(s.In(q), s.In(k), s.In(v), s.In(out), s.In(dout), s.In(lse), batch, seq_len, heads, scale, s.Out(dq),
                      s.Out(dk), s.Out(dv));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(q.dtype(), T, Backward<T>(q, k, v, out, dout, lse, batch, seq_len, heads, scale, dq, dk, dv));
}

}  // namespace moe::kernels::cpu
