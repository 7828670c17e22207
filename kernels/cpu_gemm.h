// The CPU GEMM on raw pointers, declared at the dispatch layer and defined by the CPU backend
// (kernels/cpu/gemm.cc, gemm_blocked.cc): what the CPU kernels build on, also public through
// kernels/gemm.h for tests, benchmarks and the MFU probe. Declared here, not in kernels/cpu/, so
// that no include points from the dispatch layer down into a backend's folder (scripts/layers.sh).
#pragma once

#include <cstdint>
#include <string>

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
// BLAS is linked; exposed for tests and benchmarks; kernels/cpu/gemm_blocked.cc): each element of
// C the chain c = fma(alpha a_ik, b_kj, c) over k in order from beta c (0 when beta is 0), the
// same bits whatever M, N, the element's place, the thread count and the ISA.
template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);
// acc[i ldacc + j] += (double) (op(A) op(B))_ij, each product element the chain above from 0 (what
// BlockedGemm with alpha 1, beta 0 stores), added to the f64 accumulator in the GEMM's last pass
// over the element instead of stored: deterministic training's gradient contributions without a
// scratch tensor, a conversion pass and an add pass.
template <typename T>
void BlockedGemmAccumulate(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                           int64_t lda, const T* b, int64_t ldb, double* acc, int64_t ldacc);
// The register tiles BlockedGemm runs: "avx512", "avx2" or "scalar" (the widest this CPU has, or
// MOE_CPU_GEMM_ISA's where the CPU has it). All give the same bits.
std::string BlockedGemmIsa();
// Chooses them ("" for the widest); false, changing nothing, when this build or CPU lacks `isa`.
bool SetBlockedGemmIsa(const std::string& isa);
}  // namespace cpu

}  // namespace moe::kernels
