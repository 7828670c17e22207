// DeepSeek-V3 MoE routing (docs/reference/flops-and-models.md, "routing, exactly"):
// scores from the router logits, biased selection, group-limited top-k, normalised weights; and the
// sequence-wise balance loss.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// scores = sigmoid(logits) (or softmax over experts); selection on scores + bias (group-limited);
// topk_w = the unbiased scores of the chosen experts (normalised over them with sigmoid) *
// route_scale. Ties go to the lower expert index.
//   logits [T, E], bias [E], scores [T, E], topk_idx i32 [T, k], topk_w [T, k]
void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg,
                   const Tensor& scores, const Tensor& topk_idx, const Tensor& topk_w);
// dlogits from the gradient of the weights (dtopk_w) plus, when defined, a gradient on the scores
// from elsewhere (the balance loss). The selection itself takes no gradient.
//   scores [T, E], topk_idx [T, k], dtopk_w [T, k], dscores_extra [T, E] or undefined, dlogits [T,
//   E]
void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w,
                    const Tensor& dscores_extra, const RouterConfig& cfg, const Tensor& dlogits);

// Sequence-wise balance loss over `num_seqs` sequences of `seq_len` tokens (T = num_seqs *
// seq_len), the paper's eq. 18 (and Megatron's): the counts come from each token's top_k of the
// UNBIASED scores over all experts (no bias, no group mask), whatever the biased, group-limited
// selection chose:
//   f_i = E / (k * S) * #{t : i in top_k(s_{., t})},  s'_{i,t} = s_{i,t} / sum_j s_{j,t},  P_i =
//   mean_t s'_{i,t} loss = coeff * sum over sequences of sum_i f_i * P_i
// Returns the loss; when dscores is defined, adds d loss / d scores to it (f is a constant). Ties
// in the top_k go to the lower expert index.
//   scores [T, E] f32/f64, dscores [T, E] or undefined
double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                  double coeff, const Tensor& dscores);
// The same, its loss added to acc[slot] on the device (acc: f64 [n] on the scores' device): no host
// read.
void SeqAuxLossInto(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                    double coeff, const Tensor& dscores, const Tensor& acc, int64_t slot);

// Tokens per expert: counts[e] = #{(t, j) : topk_idx[t, j] = e}. counts: host vector of E.
void CountTokensPerExpert(const Tensor& topk_idx, int64_t num_experts, int64_t* counts);

}  // namespace moe::kernels
