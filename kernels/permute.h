// Dropless MoE dispatch helpers: the token -> expert permutation and the weighted combine.
//
// A "slot" is one (token, choice) pair: slot t*k + j is token t's j-th expert. The permuted buffer
// holds one row per slot, grouped by expert (and, within an expert, in token order), so grouped GEMMs
// see each expert's rows contiguously.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace moe::kernels {

struct DispatchPlan {
  int64_t num_tokens = 0, top_k = 0, num_experts = 0;
  std::vector<int64_t> counts;        // [E] rows per expert
  std::vector<int64_t> offsets;       // [E + 1] first row of each expert
  std::vector<int32_t> token_of_row;  // [T*k] the token whose copy sits in row r
  std::vector<int32_t> row_of_slot;   // [T*k] where slot t*k + j sits
};

// Built on the host from the routing decisions (topk_idx [T, k] as host data).
DispatchPlan BuildDispatchPlan(const int32_t* topk_idx, int64_t num_tokens, int64_t top_k, int64_t num_experts);
// The same plan built where topk_idx lives, with no host read: counts i64 [E], row_of_slot i32 [T, k]
// and token_of_row i32 [T*k] (written) equal BuildDispatchPlan's. The engine then reads the counts
// alone (the grouped GEMMs' sizes, the all-to-all's splits). CUDA: a stable counting sort
// (kernels/cuda/routing_kernels.cuh: block histograms, then one block per expert writes its rows in
// slot order, ranked by warp ballots); an expert index out of range is recorded (kBadExpert, the step fails at its read)
// and routed to expert 0, so what follows stays in bounds. The CPU stops there with MOE_CHECK.
void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row);

// dx[t] = sum_j dxp[row_of_slot[t, j]]: the backward of gathering x into the permuted rows.
//   dxp [R, D], row_of_slot i32 [T, k], dx [T, D] (written)
void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx);
// y[t] += sum_j w[t, j] * yp[row_of_slot[t, j]]
//   yp [R, D], row_of_slot i32 [T, k], w [T, k], y [T, D] (accumulated)
void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y);
// dyp[row_of_slot[t, j]] = w[t, j] * dy[t];  dw[t, j] = <dy[t], yp[row_of_slot[t, j]]>
void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw);

}  // namespace moe::kernels
