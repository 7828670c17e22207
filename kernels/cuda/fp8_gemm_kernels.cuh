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

// x [rows, cols] (row-major) as an operand with 1 x 128 tiles along its reduction dimension, the
// columns (outer = rows, reduction = cols): block (o, l), 128 threads over reduction indices
// [128 l, 128 l + 128) of row o, a warp reading 32 consecutive elements. Outer indices up to
// outer_pad and reduction indices up to red_pad are zeros past x's (their tiles' scale is 1).
// q [outer_pad, red_pad]; scales at l * outer_pad + o.
template <typename T>
__global__ void QuantVec128Kernel(const T* x, int64_t rows, int64_t cols, int64_t outer_pad,
                                  int64_t red_pad, uint8_t* q, float* scales) {
  const int64_t o = blockIdx.x, l = blockIdx.y, i = l * kBlock + threadIdx.x;
  float v = 0.f;
  if (i < cols && o < rows) v = Ld(x[o * cols + i]);
  const float scale = TileScaleOf(BlockMax(fabsf(v)));
  if (i < red_pad) q[o * red_pad + i] = ToE4M3(v / scale);
  if (threadIdx.x == 0) scales[l * outer_pad + o] = scale;
}

constexpr int kVecOuterTile = 32;  // outer indices per block of QuantVec128TransposedKernel

// The same operand of xᵀ (the Wgrad operands: x [tokens, features] in 1 x 128 tiles along the
// tokens; outer = cols, reduction = rows), read coalesced: block (ob, l) stages rows
// [128 l, 128 l + 128) x columns [32 ob, 32 ob + 32) of x in shared memory (a warp reads 32
// consecutive elements of a row; the row stride of 33 keeps both passes free of bank conflicts),
// then each warp takes outer indices in turn: the amax of its 128 values, the scale, and 128
// consecutive e4m3 bytes of q. Blocks of 128 threads; the grid's x covers outer_pad.
template <typename T>
__global__ void QuantVec128TransposedKernel(const T* x, int64_t rows, int64_t cols,
                                            int64_t outer_pad, int64_t red_pad, uint8_t* q,
                                            float* scales) {
  __shared__ float tile[kBlock][kVecOuterTile + 1];
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kVecOuterTile, l = blockIdx.y;
  for (int k = threadIdx.x; k < kBlock * kVecOuterTile; k += blockDim.x) {
    const int i = k / kVecOuterTile, oo = k % kVecOuterTile;
    const int64_t row = l * kBlock + i, col = o0 + oo;
    tile[i][oo] = row < rows && col < cols ? Ld(x[row * cols + col]) : 0.f;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int oo = warp; oo < kVecOuterTile && o0 + oo < outer_pad; oo += warps) {  // warp-uniform
    const int64_t o = o0 + oo;
    float amax = 0.f;
    for (int i = lane; i < kBlock; i += 32) amax = fmaxf(amax, fabsf(tile[i][oo]));
    const float scale = TileScaleOf(WarpMax(amax));
    for (int i = lane; i < kBlock; i += 32)
      q[o * red_pad + l * kBlock + i] = ToE4M3(tile[i][oo] / scale);
    if (lane == 0) scales[l * outer_pad + o] = scale;
  }
}

// w [rows, cols] in 128 x 128 blocks as an operand: not transposed, outer = rows, reduction = cols;
// transposed, the other way. One block of 128 threads per (outer block, reduction block), a thread
// per column of the block, so a warp reads (and, not transposed, writes) 32 consecutive elements of
// a row; transposed, the e4m3 block is staged in shared memory ([column][row], rows padded by 4
// bytes: no bank conflicts) and written out a row of q at a time. The scale at
// outer_block * l4 + reduction_block (l4: reduction blocks rounded up to 4; the padding is 1).
template <typename T>
__global__ void QuantBlk128Kernel(const T* w, int64_t rows, int64_t cols, bool transpose,
                                  int64_t l4, uint8_t* q, float* scales) {
  __shared__ uint8_t tile[kBlock][kBlock + 4];
  const int64_t rb = transpose ? blockIdx.y : blockIdx.x, cb = transpose ? blockIdx.x : blockIdx.y;
  const int64_t r0 = rb * kBlock, c0 = cb * kBlock, r1 = min(rows, r0 + kBlock),
                c1 = min(cols, c0 + kBlock);
  const int64_t c = c0 + threadIdx.x;
  const bool mine = c < c1;  // this thread's column lies in the block
  float amax = 0.f;
  for (int64_t r = r0; mine && r < r1; ++r) amax = fmaxf(amax, fabsf(Ld(w[r * cols + c])));
  const float scale = TileScaleOf(BlockMax(amax));
  const int64_t red = transpose ? rows : cols;
  for (int64_t r = r0; mine && r < r1; ++r) {
    const uint8_t e = ToE4M3(Ld(w[r * cols + c]) / scale);
    if (transpose)
      tile[threadIdx.x][r - r0] = e;
    else
      q[r * red + c] = e;
  }
  if (transpose) {
    __syncthreads();
    for (int64_t cc = 0; cc < c1 - c0; ++cc) {
      if (static_cast<int64_t>(threadIdx.x) < r1 - r0)
        q[(c0 + cc) * red + r0 + threadIdx.x] = tile[cc][threadIdx.x];
    }
  }
  if (threadIdx.x == 0) scales[blockIdx.x * l4 + blockIdx.y] = scale;
  if (threadIdx.x == 0 && blockIdx.y == gridDim.y - 1) {
    for (int64_t p = gridDim.y; p < l4; ++p) scales[blockIdx.x * l4 + p] = 1.f;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
