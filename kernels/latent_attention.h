// Decoding attention over MLA's latent cache with the up-projections absorbed (DeepSeek-V3's
// inference, docs/reference/deepseek-v3-architecture.md): the cache keeps per token only the
// normalised kv latent c (kv_lora_rank values) and the rotated shared key k_r (qk_rope_head_dim),
// and every head attends to the same rows. A head's query is [q_nope . W_uk (r values); q_rope
// (d_r)], so its score with row t is q . cache[t]; its output is the softmax-weighted sum of the
// rows' latents, which W_uv then lifts to the value head. The positions' order is causal: the n
// queries are the sequence's last n positions.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   q     [n, H*D]   the absorbed queries, D = r + d_r
//   cache [T, D]     T >= n; query i sits at position T - n + i and attends rows 0..T - n + i
//   out   [n, H*dv]  per head: sum_t softmax_t(q . cache[t] * scale) cache[t][0..dv)
//   scale            the softmax scale (1/sqrt(d_nope + d_r), times YaRN's mscale^2)
// Scores and sums in fp32 (f64 for f64 inputs); bf16 inputs are read as fp32.
void LatentAttentionDecode(const Tensor& q, const Tensor& cache, int64_t heads, int64_t dv,
                           double scale, const Tensor& out);

}  // namespace moe::kernels
