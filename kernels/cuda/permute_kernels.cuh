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

// The same three in 16-byte vectors (8 bf16 or 4 floats) with 32-bit indices, where the row width
// is a multiple of the lanes and the pointers are 16-byte aligned (every hidden size of the
// presets): each element's arithmetic is the scalar kernels', in the same order, so the values are
// theirs bit for bit; CombineBackward's dot product sums a thread's lanes first (a fixed order, not
// the scalar kernel's).
template <typename T>
__global__ void PermuteBackwardVecKernel(const T* dxp, const int32_t* rows, T* dx, int64_t tokens,
                                         int64_t k, int64_t d) {
  constexpr int L = Vec16<T>::kLanes;
  const uint32_t dv = static_cast<uint32_t>(d / L);
  const auto* src = reinterpret_cast<const Vec16<T>*>(dxp);
  MOE_CUDA_LOOP32(i, tokens * (d / L)) {
    const uint32_t t = i / dv, c = i - t * dv;
    float s[L] = {};
    for (int64_t j = 0; j < k; ++j) {
      const Vec16<T> x = src[static_cast<int64_t>(rows[t * k + j]) * dv + c];
#pragma unroll
      for (int l = 0; l < L; ++l) s[l] += Ld(x.v[l]);
    }
    Vec16<T> o;
#pragma unroll
    for (int l = 0; l < L; ++l) o.v[l] = Cvt<T>(s[l]);
    reinterpret_cast<Vec16<T>*>(dx)[i] = o;
  }
}

template <typename T>
__global__ void CombineForwardVecKernel(const T* yp, const int32_t* rows, const T* w, T* y,
                                        int64_t tokens, int64_t k, int64_t d) {
  constexpr int L = Vec16<T>::kLanes;
  const uint32_t dv = static_cast<uint32_t>(d / L);
  const auto* src = reinterpret_cast<const Vec16<T>*>(yp);
  auto* out = reinterpret_cast<Vec16<T>*>(y);
  MOE_CUDA_LOOP32(i, tokens * (d / L)) {
    const uint32_t t = i / dv, c = i - t * dv;
    const Vec16<T> y0 = out[i];
    float s[L];
#pragma unroll
    for (int l = 0; l < L; ++l) s[l] = Ld(y0.v[l]);
    for (int64_t j = 0; j < k; ++j) {
      const float wt = Ld(w[t * k + j]);
      const Vec16<T> x = src[static_cast<int64_t>(rows[t * k + j]) * dv + c];
#pragma unroll
      for (int l = 0; l < L; ++l) s[l] += wt * Ld(x.v[l]);
    }
    Vec16<T> o;
#pragma unroll
    for (int l = 0; l < L; ++l) o.v[l] = Cvt<T>(s[l]);
    out[i] = o;
  }
}

template <typename T>
__global__ void CombineBackwardVecKernel(const T* dy, const T* yp, const int32_t* rows, const T* w,
                                         T* dyp, T* dw, int64_t k, int64_t d) {
  constexpr int L = Vec16<T>::kLanes;
  const uint32_t slot = blockIdx.x, t = slot / static_cast<uint32_t>(k);
  const uint32_t dv = static_cast<uint32_t>(d / L);
  const int64_t row = rows[slot];
  const float wt = Ld(w[slot]);
  const auto* g = reinterpret_cast<const Vec16<T>*>(dy) + static_cast<int64_t>(t) * dv;
  const auto* x = reinterpret_cast<const Vec16<T>*>(yp) + row * dv;
  auto* out = reinterpret_cast<Vec16<T>*>(dyp) + row * dv;
  float dot = 0;
  for (uint32_t c = threadIdx.x; c < dv; c += blockDim.x) {
    const Vec16<T> gv = g[c], xv = x[c];
    Vec16<T> o;
    float part = 0;
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const float gl = Ld(gv.v[l]);
      part += gl * Ld(xv.v[l]);
      o.v[l] = Cvt<T>(wt * gl);
    }
    dot += part;
    out[c] = o;
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dw[slot] = Cvt<T>(dot);
}

}  // namespace
}  // namespace moe::kernels::cuda
