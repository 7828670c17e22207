// Shared by the CUDA kernel files: launch sizes and block reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

namespace moe::kernels::cuda {

// Runs `launch` with a device buffer of n floats (one partial per row, sequence, ...), then adds the
// partials on the host in a fixed order. The buffer comes from the caching allocator: no cudaMalloc
// on the training path once warm.
double SumPartials(int64_t n, cudaStream_t s, const std::function<void(float*)>& launch);

constexpr int kThreads = 256;
inline unsigned Blocks(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ inline float BlockSum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? partial[threadIdx.x] : 0.f;
  if (warp == 0) v = WarpSum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}
__device__ inline float BlockMax(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? partial[threadIdx.x] : -INFINITY;
  if (warp == 0) v = WarpMax(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

}  // namespace moe::kernels::cuda
