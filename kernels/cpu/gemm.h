// The CPU GEMM on raw pointers (kernels/cpu/gemm.cc): what the CPU kernels build on, also public
// through kernels/gemm.h for tests and benchmarks.
#pragma once

#include <cstdint>

namespace moe::kernels {

namespace cpu {
// Row-major GEMM on raw pointers: C = alpha * op(A) @ op(B) + beta * C.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
// OpenBLAS where linked, whatever SetReproducibleCpuGemm says (the MFU probe: the machine's
// fastest).
template <typename T>
void FastestGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
// The built-in blocked GEMM, reproducible (kernels/runtime.h SetReproducibleCpuGemm; used when no
// BLAS is linked; exposed for tests and benchmarks).
template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
}  // namespace cpu

}  // namespace moe::kernels
