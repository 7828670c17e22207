// RMSNorm forward (one block per row; also fused with the residual add before it) and backward: the
// kernels of kernels/cuda/rmsnorm.cu, which launches them. nvcc compiles them there; a host
// compiler compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the
// CPU path (ctest gpu_kernels_emulated).
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

// The residual add fused with the next RMSNorm (a block's x + attention(x), then the FFN's norm):
// sum = x + r is stored (rounded to T) and normalised as stored, one block per row: the values of
// Add then RmsNormForward, bit for bit, in one pass over the row instead of three.
template <typename T>
__global__ void AddRmsNormForwardKernel(const T* x, const T* r, const T* w, float eps, T* sum, T* y,
                                        float* rstd, int64_t d) {
  const int64_t row = blockIdx.x;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const T s = Cvt<T>(Ld(x[row * d + j]) + Ld(r[row * d + j]));
    sum[row * d + j] = s;
    const float v = Ld(s);
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[row] = inv;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)  // this thread's own stores, read back
    y[row * d + j] = Cvt<T>(Ld(sum[row * d + j]) * inv * Ld(w[j]));
}

// One block per row writes dx (plus dres, the residual's gradient, when given: the two adds of
// RmsNormBackward then Add, rounded as they round); dw is summed over a strip of rows per block in
// registers, then added once per column (an atomic per column and block, not per element).
template <typename T>
__global__ void RmsNormBackwardKernel(const T* dy, const T* x, const T* w, const float* rstd,
                                      const T* dres, T* dx, float* dw, int64_t rows, int64_t d,
                                      int64_t rows_per_block) {
  const int64_t r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = dy + r * d;
    const T* xr = x + r * d;
    const float inv = rstd[r];
    float dot = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += Ld(g[j]) * Ld(w[j]) * Ld(xr[j]);
    dot = BlockSum(dot);
    const float coef = dot * inv * inv * inv / static_cast<float>(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T v = Cvt<T>(Ld(g[j]) * Ld(w[j]) * inv - Ld(xr[j]) * coef);
      dx[r * d + j] = dres == nullptr ? v : Cvt<T>(Ld(v) + Ld(dres[r * d + j]));
    }
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) acc += Ld(dy[r * d + j]) * Ld(x[r * d + j]) * rstd[r];
    atomicAdd(&dw[j], acc);
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
