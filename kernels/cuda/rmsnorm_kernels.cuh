// RMSNorm forward (one block per row) and backward: the kernels of kernels/cuda/rmsnorm.cu, which
// launches them. nvcc compiles them there; a host compiler compiles them under
// tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path (ctest
// gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (rmsnorm.cu, or the emulated test).
namespace {

// Rows of x each backward block sums dw over before its atomics.
constexpr int64_t kRowsPerBlock = 32;

template <typename T>
__global__ void RmsNormForwardKernel(const T* x, const T* w, float eps, T* y, float* rstd,
                                     int64_t d) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * d;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = Ld(xr[j]);
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y[r * d + j] = Cvt<T>(Ld(xr[j]) * inv * Ld(w[j]));
}

// One block per row writes dx; dw is summed over a strip of rows per block in registers, then added
// once per column (an atomic per column and block, not per element).
template <typename T>
__global__ void RmsNormBackwardKernel(const T* dy, const T* x, const T* w, const float* rstd, T* dx,
                                      float* dw, int64_t rows, int64_t d, int64_t rows_per_block) {
  const int64_t r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = dy + r * d;
    const T* xr = x + r * d;
    const float inv = rstd[r];
    float dot = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += Ld(g[j]) * Ld(w[j]) * Ld(xr[j]);
    dot = BlockSum(dot);
    const float coef = dot * inv * inv * inv / static_cast<float>(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      dx[r * d + j] = Cvt<T>(Ld(g[j]) * Ld(w[j]) * inv - Ld(xr[j]) * coef);
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) acc += Ld(dy[r * d + j]) * Ld(x[r * d + j]) * rstd[r];
    atomicAdd(&dw[j], acc);
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
