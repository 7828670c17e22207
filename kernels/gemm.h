// Dense GEMM and grouped GEMM over experts.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu_gemm.h"
#include "kernels/kernel_state.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// c = alpha * op(a) @ op(b) + beta * c, row-major 2-D tensors; op transposes when asked.
//   a: [M, K] (or [K, M] with trans_a), b: [K, N] (or [N, K] with trans_b), c: [M, N]
void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          double alpha = 1.0, double beta = 0.0);

// acc += op(a) @ op(b), acc f64 [M, N] and a, b fp32 (or bf16, or f64): the product computed as
// Gemm with beta 0 computes it on this device (the reproducible chain on a CPU in
// training.deterministic) and each element rounded to a's dtype, then added in f64. On the CPU the
// addition is the GEMM's epilogue (no product tensor, no conversion pass): deterministic
// training's gradient contributions (worker/engine/model/param.h GradSink).
void GemmAccumulate(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                    const Tensor& acc);

// Grouped GEMMs over experts. Rows of the activations are grouped: group g owns rows
// [offsets[g], offsets[g+1]) (offsets on the host, G+1 entries, offsets[0] = 0). Empty groups are
// fine. Forward:         y[rows_g] = x[rows_g] @ w[g]^T          x [R, K], w [G, N, K], y [R, N]
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                 const Tensor& y);
// The forward with the groups' row counts where the routing plan leaves them: counts i64 [G] on
// y's device, summing to R. On CUDA, CUTLASS's Hopper grouped GEMM takes them from device memory
// (bf16, sm_90, N and K multiples of 8): no host read, nothing a CUDA graph could not capture.
// Elsewhere (the CPU, another card or dtype, a build without the Hopper paths) the counts are read
// to the host (on CUDA a host synchronisation, counted) and GroupedGemm runs; there bad counts fail
// as GroupedGemm's offsets do, while the device path cuts rows past R and leaves rows past a short
// sum unwritten (it cannot see the counts).
void GroupedGemmDeviceCounts(const Tensor& x, const Tensor& w, const Tensor& counts,
                             const Tensor& y);
// Backward, data:  dx[rows_g] = dy[rows_g] @ w[g]           dy [R, N], w [G, N, K], dx [R, K]
void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets,
                             const Tensor& dx);
// Backward, weight: dw[g] += dy[rows_g]^T @ x[rows_g]       dy [R, N], x [R, K], dw [G, N, K]
// (accumulates; a group with no rows leaves its dw unchanged)
void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x,
                               const std::vector<int64_t>& offsets, const Tensor& dw);

}  // namespace moe::kernels
