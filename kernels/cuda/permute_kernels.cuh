// The MoE dispatch's row movements (the routing plan's kernels are routing_kernels.cuh): the
// kernels of kernels/cuda/permute.cu, which launches them. nvcc compiles them there; a host
// compiler compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the
// CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (permute.cu, or the emulated test).
namespace {

template <typename T>
__global__ void PermuteBackwardKernel(const T* dxp, const int32_t* rows, T* dx, int64_t tokens,
                                      int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = 0;
    for (int64_t j = 0; j < k; ++j) s += Ld(dxp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    dx[i] = Cvt<T>(s);
  }
}

template <typename T>
__global__ void CombineForwardKernel(const T* yp, const int32_t* rows, const T* w, T* y,
                                     int64_t tokens, int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = Ld(y[i]);
    for (int64_t j = 0; j < k; ++j)
      s += Ld(w[t * k + j]) * Ld(yp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    y[i] = Cvt<T>(s);
  }
}

// One block per (token, choice): the weight's gradient is a dot product over the row.
template <typename T>
__global__ void CombineBackwardKernel(const T* dy, const T* yp, const int32_t* rows, const T* w,
                                      T* dyp, T* dw, int64_t k, int64_t d) {
  const int64_t slot = blockIdx.x, t = slot / k;
  const int64_t row = rows[slot];
  const float wt = Ld(w[slot]);
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float g = Ld(dy[t * d + c]);
    dot += g * Ld(yp[row * d + c]);
    dyp[row * d + c] = Cvt<T>(wt * g);
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dw[slot] = Cvt<T>(dot);
}

}  // namespace
}  // namespace moe::kernels::cuda
