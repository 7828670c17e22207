// Causal attention, tiled with an online softmax (FlashAttention's algorithm): per sequence and
// head,
//   out[s] = sum_{t <= s} softmax_t(q[s] . k[t] * scale) v[t]
// in O(S) memory: no [S, S] matrix is kept, only each row's log-sum-exp for the backward, which
// recomputes the probabilities tile by tile. Tiles entirely above the diagonal are skipped. The
// query and key head size d_qk may differ from the value head size d_v (MLA: 192 and 128).
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   q [B*S, H*dqk], k [B*S, H*dqk], v [B*S, H*dv]   token-major, heads side by side
//   out [B*S, H*dv]
//   lse [B*H*S]  the log-sum-exp of each row's scaled scores (f32; f64 for f64 inputs), row (b, h,
//   s) scale        the softmax scale: 1/sqrt(dqk) (times mscale^2 with YaRN)
void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                      int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                      const Tensor& lse);
//   dout [B*S, H*dv]; dq, dk, dv written (same shapes as q, k, v). Deterministic: no atomics.
void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t batch, int64_t seq_len,
                       int64_t heads, double scale, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv);

}  // namespace moe::kernels
