// The FP8 GEMMs' quantisers into cuBLASLt's operand and scale layouts: the kernels of
// kernels/cuda/fp8_gemm.cu, which launches them. nvcc compiles them there; a host compiler compiles
// them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path (ctest
// gpu_kernels_emulated).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (fp8_gemm.cu, or the emulated test).
namespace {

constexpr int kBlock = 128;  // the FP8 tiles' side (DeepSeek-V3's 1 x 128 and 128 x 128)

__device__ inline float TileScaleOf(float amax) { return amax > 0.f ? amax / 448.f : 1.f; }

__device__ inline uint8_t ToE4M3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// x [rows, cols] (row-major) as an operand with 1 x 128 tiles along its reduction dimension: not
// transposed, outer = rows and the reduction = cols; transposed, outer = cols, reduction = rows.
// Block (o, l): 128 threads over reduction indices [128 l, 128 l + 128) of outer index o. Outer
// indices up to outer_pad and reduction indices up to red_pad are zeros past x's (their tiles'
// scale is 1). q [outer_pad, red_pad]; scales at l * outer_pad + o.
template <typename T>
__global__ void QuantVec128Kernel(const T* x, int64_t rows, int64_t cols, bool transpose,
                                  int64_t outer_pad, int64_t red_pad, uint8_t* q, float* scales) {
  const int64_t outer = transpose ? cols : rows, red = transpose ? rows : cols;
  const int64_t o = blockIdx.x, l = blockIdx.y, i = l * kBlock + threadIdx.x;
  float v = 0.f;
  if (i < red && o < outer) v = Ld(transpose ? x[i * cols + o] : x[o * cols + i]);
  const float scale = TileScaleOf(BlockMax(fabsf(v)));
  if (i < red_pad) q[o * red_pad + i] = ToE4M3(v / scale);
  if (threadIdx.x == 0) scales[l * outer_pad + o] = scale;
}

// w [rows, cols] in 128 x 128 blocks as an operand: not transposed, outer = rows, reduction = cols;
// transposed, the other way. One block of 128 threads per (outer block, reduction block); the scale
// at outer_block * l4 + reduction_block (l4: reduction blocks rounded up to 4; the padding is 1).
template <typename T>
__global__ void QuantBlk128Kernel(const T* w, int64_t rows, int64_t cols, bool transpose,
                                  int64_t l4, uint8_t* q, float* scales) {
  const int64_t rb = transpose ? blockIdx.y : blockIdx.x, cb = transpose ? blockIdx.x : blockIdx.y;
  const int64_t r0 = rb * kBlock, c0 = cb * kBlock, r1 = min(rows, r0 + kBlock),
                c1 = min(cols, c0 + kBlock);
  float amax = 0.f;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
    for (int64_t c = c0; c < c1; ++c) amax = fmaxf(amax, fabsf(Ld(w[r * cols + c])));
  }
  const float scale = TileScaleOf(BlockMax(amax));
  const int64_t red = transpose ? rows : cols;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
    for (int64_t c = c0; c < c1; ++c) {
      const uint8_t e = ToE4M3(Ld(w[r * cols + c]) / scale);
      if (transpose)
        q[c * red + r] = e;
      else
        q[r * red + c] = e;
    }
  }
  if (threadIdx.x == 0) scales[blockIdx.x * l4 + blockIdx.y] = scale;
  if (threadIdx.x == 0 && blockIdx.y == gridDim.y - 1) {
    for (int64_t p = gridDim.y; p < l4; ++p) scales[blockIdx.x * l4 + p] = 1.f;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
