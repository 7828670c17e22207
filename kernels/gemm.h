// Dense GEMM and grouped GEMM over experts.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace moe::kernels {

// c = alpha * op(a) @ op(b) + beta * c, row-major 2-D tensors; op transposes when asked.
//   a: [M, K] (or [K, M] with trans_a), b: [K, N] (or [N, K] with trans_b), c: [M, N]
void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha = 1.0,
          double beta = 0.0);

// Grouped GEMMs over experts. Rows of the activations are grouped: group g owns rows
// [offsets[g], offsets[g+1]) (offsets on the host, G+1 entries, offsets[0] = 0). Empty groups are fine.
// Forward:         y[rows_g] = x[rows_g] @ w[g]^T          x [R, K], w [G, N, K], y [R, N]
void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y);
// Backward, data:  dx[rows_g] = dy[rows_g] @ w[g]           dy [R, N], w [G, N, K], dx [R, K]
void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx);
// Backward, weight: dw[g] += dy[rows_g]^T @ x[rows_g]       dy [R, N], x [R, K], dw [G, N, K]
// (accumulates; a group with no rows leaves its dw unchanged)
void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw);

// How the CUDA path runs a grouped GEMM (kernels/cuda/gemm.cu): by rows per expert (auto: one
// cublasGemmGroupedBatchedEx call below 1,024 rows per expert, else a call per expert), or forced.
// The environment's MOE_GROUPED_GEMM=loop|grouped sets the starting mode; the CPU ignores it.
enum class GroupedGemmMode { kAuto, kLoop, kGrouped };
void SetGroupedGemmMode(GroupedGemmMode mode);
GroupedGemmMode GetGroupedGemmMode();

namespace cpu {
// Row-major GEMM on raw pointers: C = alpha * op(A) @ op(B) + beta * C.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);
// OpenBLAS where linked, whatever SetReproducibleCpuGemm says (the MFU probe: the machine's fastest).
template <typename T>
void FastestGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
// The built-in blocked GEMM, reproducible (kernels/runtime.h SetReproducibleCpuGemm; used when no BLAS
// is linked; exposed for tests and benchmarks).
template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
}  // namespace cpu

}  // namespace moe::kernels
