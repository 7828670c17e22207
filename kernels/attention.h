// Causal multi-head self-attention core: softmax(q k^T / sqrt(d), causal) v, per sequence and head.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   qkv   [B*S, 3*H*d]  packed q | k | v (RoPE already applied to q and k)
//   out   [B*S, H*d]    heads concatenated
//   probs [B, H, S, S]  softmax probabilities, saved for the backward (zero above the diagonal)
void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
                      const Tensor& out, const Tensor& probs);
//   dqkv [B*S, 3*H*d] is written (all three parts).
void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv);

}  // namespace moe::kernels
