// CUTLASS's Hopper grouped GEMM as the CUDA GEMM path calls it: declared here, with no CUTLASS or
// CUDA types (the stream is a cudaStream_t passed as void*), so that kernels/cuda/gemm.cu reaches
// it without an include into the Hopper folder; defined in kernels/cuda/sm90a/grouped_gemm.cu,
// built only where configure found CUTLASS's headers (MOE_WITH_SM90A).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::kernels::cuda::sm90a {

// For every group g with rows offsets[g]..offsets[g+1]: y_g[m_g x n] = x_g[m_g x k] * w_g[n x k]^T,
// bf16 in and out with fp32 accumulation, all row-major; w holds the groups' [n x k] blocks one
// after the other (the experts' weights as the MoE layer keeps them), x and y the groups' rows one
// after the other. Empty groups are skipped. Runs on `stream` of the current device. Returns false,
// with *why, when this path cannot take it (the device is not sm_90, n or k is not a multiple of 8
// for TMA's 16-byte alignment, CUTLASS refused the problem) and the caller takes another path; a
// CUDA error after launch is the caller's to find, as for any kernel.
bool GroupedGemmBf16(const void* x, const void* w, void* y, const std::vector<int64_t>& offsets,
                     int64_t n, int64_t k, void* stream, std::string* why);

// The same with the groups' row counts on the device (int64, `groups` of them, summing to `rows`:
// the routing plan's per-expert counts): a kernel writes the problem shapes, pointers and strides
// where they are, so the host reads nothing and the call can be captured in a CUDA graph. Every
// group is one problem; an empty one has no tiles and the kernel's scheduler skips it. The host
// cannot check the counts without reading them: counts that run past `rows` are cut there, and
// counts summing to fewer leave y's last rows unwritten.
bool GroupedGemmBf16DeviceCounts(const void* x, const void* w, void* y, const int64_t* counts_dev,
                                 int64_t groups, int64_t rows, int64_t n, int64_t k, void* stream,
                                 std::string* why);

}  // namespace moe::kernels::cuda::sm90a
