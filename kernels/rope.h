// Rotary position embedding (RoPE, half-split layout as in GPT-NeoX/Llama) on the q and k parts of a
// packed qkv tensor, in place. Token t of a batch of sequences sits at position t % seq_len.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   qkv [T, 3 * heads * head_dim]: q = columns [0, H*d), k = [H*d, 2*H*d), v untouched.
void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta);
// The inverse rotation applied to the gradient (a rotation's transpose), in place on dqkv.
void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta);

}  // namespace moe::kernels
