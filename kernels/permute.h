// Dropless MoE dispatch helpers: the token -> expert permutation and the weighted combine.
//
// A "slot" is one (token, choice) pair: slot t*k + j is token t's j-th expert. The permuted buffer
// holds one row per slot, grouped by expert (and, within an expert, in token order), so grouped
// GEMMs see each expert's rows contiguously.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dispatch_plan.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// The same plan built where topk_idx lives, with no host read: counts i64 [E], row_of_slot i32 [T,
// k] and token_of_row i32 [T*k] (written) equal BuildDispatchPlan's. The engine then reads the
// counts alone (the grouped GEMMs' sizes, the all-to-all's splits). CUDA: a stable counting sort
// (kernels/cuda/routing_kernels.cuh: block histograms, then one block per expert writes its rows in
// slot order, ranked by warp ballots); an expert index out of range is recorded (kBadExpert, the
// step fails at its read) and routed to expert 0, so what follows stays in bounds. The CPU stops
// there with MOE_CHECK.
void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row);

// dx[t] = sum_j dxp[row_of_slot[t, j]]: the backward of gathering x into the permuted rows.
//   dxp [R, D], row_of_slot i32 [T, k], dx [T, D] (written)
void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx);
// y[t] += sum_j w[t, j] * yp[row_of_slot[t, j]]
//   yp [R, D], row_of_slot i32 [T, k], w [T, k], y [T, D] (accumulated)
void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y);
// dyp[row_of_slot[t, j]] = w[t, j] * dy[t];  dw[t, j] = <dy[t], yp[row_of_slot[t, j]]>
void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w,
                     const Tensor& dyp, const Tensor& dw);

}  // namespace moe::kernels
