// FP8 (e4m3) quantise-dequantise of tiles: the kernels of kernels/cuda/fp8.cu, which launches them.
// nvcc compiles them there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// runs them on the CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (fp8.cu, or the emulated test).
namespace {

constexpr int kTileThreads = 128;

__device__ inline float E4M3RoundTrip(float v) {
  const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  const __half_raw h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
  return __half2float(__half(h));
}

// Rows [r0, r1) of x, tiled from r0: block (bx, by) is the tile at rows r0 + bx * tile_rows and
// columns by * tile_cols.
template <typename T>
__global__ void QuantDequantKernel(const T* x, float* out, int64_t r0, int64_t r1, int64_t cols,
                                   int64_t tile_rows, int64_t tile_cols, bool pow2,
                                   int64_t first_col_tile) {
  const int64_t tr0 = r0 + blockIdx.x * tile_rows, tr1 = min(r1, tr0 + tile_rows);
  const int64_t c0 = (first_col_tile + blockIdx.y) * tile_cols, c1 = min(cols, c0 + tile_cols);
  const int64_t w = c1 - c0, n = (tr1 - tr0) * w;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    amax = fmaxf(amax, fabsf(Ld(x[(tr0 + i / w) * cols + c0 + i % w])));
  amax = BlockMax(amax);
  float scale = 1.f;
  if (amax > 0.f) {
    scale = amax / 448.f;
    if (pow2) {  // the smallest power of two >= scale, exactly (as kernels/fp8.cc TileScale)
      int e = 0;
      const float m = frexpf(scale, &e);
      scale = ldexpf(1.f, m == 0.5f ? e - 1 : e);
    }
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t at = (tr0 + i / w) * cols + c0 + i % w;
    out[at] = E4M3RoundTrip(Ld(x[at]) / scale) * scale;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
