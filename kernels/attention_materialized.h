// The textbook causal attention, CPU only: the reference the tiled kernel (kernels/attention.h) is
// measured against for memory and speed (training.attention: materialized). Per sequence and head
// the forward forms the [S, S] scores with one GEMM, softmaxes them in place and KEEPS the
// probabilities P for the backward; the backward forms dP = dO V^T in a [B, H, S, S] tensor of its
// own and turns it in place into dS = P (dP - rowsum(P dP)) scale, as the first engine's attention
// did. Both are allocated as Tensors, so the allocator (and a memory peak read from it) sees them.
// Same semantics as AttentionForward/AttentionBackward: q/k/v token-major, d_qk may differ from
// d_v, causal.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   q [B*S, H*dqk], k [B*S, H*dqk], v [B*S, H*dv]   token-major, heads side by side (f32, f64 or
//   bf16) out   [B*S, H*dv] probs [B*H, S, S]  softmax probabilities, zero above the diagonal (f32
//   for f32/bf16, f64 for f64) scale              the softmax scale
void MaterializedAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                                  int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                                  const Tensor& probs);
//   dout [B*S, H*dv]; dq, dk, dv written (same shapes as q, k, v).
void MaterializedAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& probs, const Tensor& dout, int64_t batch,
                                   int64_t seq_len, int64_t heads, double scale, const Tensor& dq,
                                   const Tensor& dk, const Tensor& dv);

// The bytes the probabilities of one call keep: B * H * S * S elements of `dtype`'s accumulation
// type.
size_t MaterializedAttentionProbsBytes(int64_t batch, int64_t seq_len, int64_t heads, DType dtype);

}  // namespace moe::kernels
