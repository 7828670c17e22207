// The runtime's small kernels: the bad-index flags folded into the step's buffer, partials added in
// order (a few) or by a tree (many): the kernels of kernels/cuda/runtime.cu, which launches them.
// nvcc compiles them there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// runs them on the CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (runtime.cu, or the emulated test).
namespace {

__global__ void FoldBadIndicesKernel(unsigned* flags, double* dst) {
  *dst = static_cast<double>(*flags);
  *flags = 0;
}

// One thread adds the partials in order, in double: the host's sum, without the host.
template <typename P>
__global__ void AddPartialsKernel(const P* partial, int64_t n, double* dst) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += partial[i];
  *dst += total;
}

// Many partials (the loss's one per row: 16,384 in a `small` micro-batch): one block of kThreads
// threads, each adding a fixed stride of them in double, then a tree over the threads in shared
// memory. The order is fixed, so the sum is the same on every run (not the host's in-order sum:
// rounding apart at 1e-16); a single thread took tens of microseconds a call here.
template <typename P>
__global__ void ReducePartialsKernel(const P* partial, int64_t n, double* dst) {
  __shared__ double sum[kThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  sum[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) sum[threadIdx.x] += sum[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *dst += sum[0];
}

}  // namespace
}  // namespace moe::kernels::cuda
