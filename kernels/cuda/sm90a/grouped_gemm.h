// The experts' grouped GEMM on Hopper through CUTLASS (its sm_90a ptr-array kernel: TMA loads,
// warp-specialised producer and consumers, wgmma), built only when CUTLASS's headers were found
// (cmake/MoeGpuLibraries.cmake: MOE_WITH_SM90A). Host-side API, no CUTLASS types: callers include
// this without CUTLASS's headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moe::kernels::cuda::sm90a {

// The CUTLASS version this build was compiled with ("4.2.0").
std::string CutlassVersion();

// For every group g with rows offsets[g]..offsets[g+1]: y_g[m_g x n] = x_g[m_g x k] * w_g[n x k]^T,
// bf16 in and out with fp32 accumulation, all row-major; w holds the groups' [n x k] blocks one
// after the other (the experts' weights as the MoE layer keeps them), x and y the groups' rows one
// after the other. Empty groups are skipped. Runs on `stream` of the current device. Returns false,
// with *why, when this path cannot take it (the device is not sm_90, n or k is not a multiple of 8
// for TMA's 16-byte alignment, CUTLASS refused the problem) and the caller takes another path; a
// CUDA error after launch is the caller's to find, as for any kernel.
bool GroupedGemmBf16(const void* x, const void* w, void* y, const std::vector<int64_t>& offsets,
                     int64_t n, int64_t k, cudaStream_t stream, std::string* why);

}  // namespace moe::kernels::cuda::sm90a
