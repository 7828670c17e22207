// The CPU DeepSeek-V3 routing: scores, biased group-limited top-k, weights; its backward; the
// sequence-wise balance loss.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

// Indices of the k largest values, largest first, ties to the lower index.
template <typename T>
void TopK(const T* v, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}

template <typename T>
void Route(const T* logits, const T* bias, const RouterConfig& cfg, int64_t tokens, int64_t experts,
           T* scores, int32_t* topk_idx, T* topk_w) {
  const int64_t k = cfg.top_k, groups = cfg.num_groups, per_group = experts / groups;
  ParallelFor(tokens, experts * 8, [&](int64_t b, int64_t e) {
    std::vector<T> sel(static_cast<size_t>(experts));
    std::vector<T> group_score(static_cast<size_t>(groups));
    std::vector<int32_t> keep(static_cast<size_t>(cfg.topk_groups));
    for (int64_t t = b; t < e; ++t) {
      const T* x = logits + t * experts;
      T* s = scores + t * experts;
      if (cfg.sigmoid) {
        for (int64_t i = 0; i < experts; ++i) s[i] = T(1) / (T(1) + std::exp(-x[i]));
      } else {
        T mx = x[0];
        for (int64_t i = 1; i < experts; ++i) mx = std::max(mx, x[i]);
        T sum = 0;
        for (int64_t i = 0; i < experts; ++i) sum += (s[i] = std::exp(x[i] - mx));
        for (int64_t i = 0; i < experts; ++i) s[i] /= sum;
      }
      for (int64_t i = 0; i < experts; ++i)
        sel[static_cast<size_t>(i)] = s[i] + (cfg.use_bias ? bias[i] : T(0));
      if (groups > 1) {
        for (int64_t g = 0; g < groups; ++g) {
          const T* gs = sel.data() + g * per_group;
          if (cfg.use_bias && per_group >= 2) {
            T a = -std::numeric_limits<T>::infinity(), c = a;  // the two highest
            for (int64_t i = 0; i < per_group; ++i) {
              if (gs[i] > a) {
                c = a;
                a = gs[i];
              } else if (gs[i] > c) {
                c = gs[i];
              }
            }
            group_score[static_cast<size_t>(g)] = a + c;
          } else {
            group_score[static_cast<size_t>(g)] = *std::max_element(gs, gs + per_group);
          }
        }
        TopK(group_score.data(), groups, cfg.topk_groups, keep.data());
        std::vector<bool> kept(static_cast<size_t>(groups), false);
        for (int32_t g : keep) kept[static_cast<size_t>(g)] = true;
        for (int64_t i = 0; i < experts; ++i) {
          if (!kept[static_cast<size_t>(i / per_group)])
            sel[static_cast<size_t>(i)] = -std::numeric_limits<T>::infinity();
        }
      }
      int32_t* idx = topk_idx + t * k;
      TopK(sel.data(), experts, k, idx);
      T* w = topk_w + t * k;
      T sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += (w[j] = s[idx[j]]);
      const T scale = static_cast<T>(cfg.route_scale);
      for (int64_t j = 0; j < k; ++j) w[j] = (cfg.sigmoid ? w[j] / sum : w[j]) * scale;
    }
  });
}

template <typename T>
void RouteBackward(const T* scores, const int32_t* topk_idx, const T* dtopk_w, const T* dextra,
                   const RouterConfig& cfg, int64_t tokens, int64_t experts, T* dlogits) {
  const int64_t k = cfg.top_k;
  const T scale = static_cast<T>(cfg.route_scale);
  ParallelFor(tokens, experts * 4, [&](int64_t b, int64_t e) {
    std::vector<T> ds(static_cast<size_t>(experts));
    for (int64_t t = b; t < e; ++t) {
      const T* s = scores + t * experts;
      const int32_t* idx = topk_idx + t * k;
      const T* dw = dtopk_w + t * k;
      if (dextra != nullptr)
        std::copy(dextra + t * experts, dextra + (t + 1) * experts, ds.begin());
      else
        std::fill(ds.begin(), ds.end(), T(0));
      if (cfg.sigmoid) {
        // w_j = scale * s_j / S, S = sum over chosen s: dS_j = scale * (dw_j / S - sum_i dw_i s_i /
        // S^2)
        T sum = 0, dot = 0;
        for (int64_t j = 0; j < k; ++j) {
          sum += s[idx[j]];
          dot += dw[j] * s[idx[j]];
        }
        for (int64_t j = 0; j < k; ++j)
          ds[static_cast<size_t>(idx[j])] += scale * (dw[j] / sum - dot / (sum * sum));
      } else {
        for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(idx[j])] += scale * dw[j];
      }
      T* dl = dlogits + t * experts;
      if (cfg.sigmoid) {
        for (int64_t i = 0; i < experts; ++i)
          dl[i] = ds[static_cast<size_t>(i)] * s[i] * (T(1) - s[i]);
      } else {
        T dot = 0;
        for (int64_t i = 0; i < experts; ++i) dot += ds[static_cast<size_t>(i)] * s[i];
        for (int64_t i = 0; i < experts; ++i) dl[i] = s[i] * (ds[static_cast<size_t>(i)] - dot);
      }
    }
  });
}

}  // namespace

void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg,
                   const Tensor& scores, const Tensor& topk_idx, const Tensor& topk_w) {
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  if (HasBf16({&logits, &bias, &scores, &topk_w})) {
    Bf16Scope s;
    // Qualified: RouterConfig would also find the public kernels::RouterForward by argument lookup.
    cpu::RouterForward(s.In(logits), s.In(bias), cfg, s.Out(scores), topk_idx, s.Out(topk_w));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(logits.dtype(), T,
                         Route<T>(logits.data<T>(), bias.data<T>(), cfg, tokens, experts,
                                  scores.data<T>(), topk_idx.data<int32_t>(), topk_w.data<T>()));
}

void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w,
                    const Tensor& dscores_extra, const RouterConfig& cfg, const Tensor& dlogits) {
  if (HasBf16({&scores, &dtopk_w, &dscores_extra, &dlogits})) {
    Bf16Scope s;
    cpu::RouterBackward(s.In(scores), topk_idx, s.In(dtopk_w), s.In(dscores_extra), cfg,
                        s.Out(dlogits));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(
      scores.dtype(), T,
      RouteBackward<T>(scores.data<T>(), topk_idx.data<int32_t>(), dtopk_w.data<T>(),
                       dscores_extra.defined() ? dscores_extra.data<T>() : nullptr, cfg,
                       scores.dim(0), scores.dim(1), dlogits.data<T>()));
}

namespace {

// Adds 1 to f for each of the token's top_k experts by unbiased score (ties to the lower index).
template <typename T>
void CountUnbiasedTopK(const T* st, int64_t experts, int64_t top_k, std::vector<T>& f,
                       std::vector<int32_t>& order) {
  for (int64_t i = 0; i < experts; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return st[a] > st[b] || (st[a] == st[b] && a < b);
  });
  for (int64_t j = 0; j < top_k; ++j) f[static_cast<size_t>(order[static_cast<size_t>(j)])] += T(1);
}

// One sequence: its loss, and (when ds) its gradient on the scores.
template <typename T>
double SeqAuxLossOfSequence(const T* s, T* ds, int64_t t0, int64_t seq_len, int64_t experts,
                            int64_t top_k, double coeff, std::vector<T>& f, std::vector<T>& p,
                            std::vector<int32_t>& order) {
  std::fill(f.begin(), f.end(), T(0));
  std::fill(p.begin(), p.end(), T(0));
  for (int64_t t = t0; t < t0 + seq_len; ++t) {
    const T* st = s + t * experts;
    CountUnbiasedTopK(st, experts, top_k, f, order);
    T sum = 0;
    for (int64_t i = 0; i < experts; ++i) sum += st[i];
    for (int64_t i = 0; i < experts; ++i) p[static_cast<size_t>(i)] += st[i] / sum;
  }
  const T fscale = static_cast<T>(experts) / static_cast<T>(top_k * seq_len);
  double loss = 0;
  for (int64_t i = 0; i < experts; ++i) {
    f[static_cast<size_t>(i)] *= fscale;
    loss += static_cast<double>(f[static_cast<size_t>(i)]) *
            static_cast<double>(p[static_cast<size_t>(i)]) / static_cast<double>(seq_len);
  }
  if (ds == nullptr) return coeff * loss;
  // d loss / d s'_{i,t} = coeff * f_i / S; through s' = s / sum(s).
  const T c = static_cast<T>(coeff) / static_cast<T>(seq_len);
  for (int64_t t = t0; t < t0 + seq_len; ++t) {
    const T* st = s + t * experts;
    T sum = 0, dot = 0;
    for (int64_t i = 0; i < experts; ++i) sum += st[i];
    for (int64_t i = 0; i < experts; ++i) dot += c * f[static_cast<size_t>(i)] * st[i] / sum;
    T* dst = ds + t * experts;
    for (int64_t i = 0; i < experts; ++i) dst[i] += (c * f[static_cast<size_t>(i)] - dot) / sum;
  }
  return coeff * loss;
}

}  // namespace

double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                  double coeff, const Tensor& dscores) {
  const int64_t experts = scores.dim(1);
  if (HasBf16({&scores, &dscores})) {
    Bf16Scope s;
    return SeqAuxLoss(s.In(scores), top_k, num_seqs, seq_len, coeff, s.Out(dscores, true));
  }
  std::vector<double> losses(static_cast<size_t>(num_seqs), 0.0);
  MOE_CPU_FLOAT_DISPATCH(scores.dtype(), T, {
    const T* s = scores.data<T>();
    T* ds = dscores.defined() ? dscores.data<T>() : nullptr;
    ParallelFor(num_seqs, seq_len * experts * 4, [&](int64_t b, int64_t e) {
      std::vector<T> f(static_cast<size_t>(experts)), p(static_cast<size_t>(experts));
      std::vector<int32_t> order(static_cast<size_t>(experts));
      for (int64_t q = b; q < e; ++q) {
        losses[static_cast<size_t>(q)] =
            SeqAuxLossOfSequence(s, ds, q * seq_len, seq_len, experts, top_k, coeff, f, p, order);
      }
    });
  });
  double total = 0;
  for (double l : losses) total += l;
  return total;
}

}  // namespace moe::kernels::cpu
