// The device side shared by the kernels (kernels/cuda/<family>_kernels.cuh): launch sizes, bf16
// loads and stores, the bad-index check, grid-stride loops, warp and block reductions.
//
// nvcc compiles these; a host compiler compiles them only under tests/gpu/cuda_emulator.h, which
// supplies the CUDA built-ins they use (__shfl_xor_sync, atomics, __shared__ as block-shared
// storage), so that every kernel runs on the CPU in ctest -L emulated.
#pragma once

#include <cuda_bf16.h>
#include <math.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/kernel_types.h"

#if !defined(__CUDACC__) && !defined(MOE_CUDA_EMULATOR)
#error \
    "kernels/cuda/device_common.cuh: compile with nvcc, or include tests/gpu/cuda_emulator.h first"
#endif

namespace moe::kernels::cuda {

// Loads and stores of the storage types: every kernel computes in fp32 (bf16 rounds to nearest even
// on the store, as the CPU reference does).
__device__ __forceinline__ float Ld(float v) { return v; }
__device__ __forceinline__ float Ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T Cvt(float v);
template <>
__device__ __forceinline__ float Cvt<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 Cvt<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Whether index i lies in [0, n); if not, records `kind` in *flags (BadIndexFlags) and the caller
// reads nothing there: a bad batch fails its step at the step's one read, never reads out of
// bounds.
__device__ __forceinline__ bool InRange(int64_t i, int64_t n, unsigned* flags, unsigned kind) {
  if (i >= 0 && i < n) return true;
  atomicOr(flags, kind);
  return false;
}

// Grid-stride loop over [0, n).
#define MOE_CUDA_LOOP(i, n)                                                 \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// Grid-stride loop over [0, n) with 32-bit indices: for n below 2^31 (the last index plus one
// stride stays below 2^32), where the 64-bit loop's index arithmetic costs twice the instructions.
#define MOE_CUDA_LOOP32(i, n)                                                            \
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < static_cast<uint32_t>(n); \
       i += gridDim.x * blockDim.x)

// 16 bytes of T (8 bf16, 4 floats): one vector load or store on the device (LDG.128 / STG.128) when
// the address is 16-byte aligned, which the launcher checks.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kLanes = 16 / static_cast<int>(sizeof(T));
  T v[kLanes];
};
// Whether every pointer is 16-byte aligned and n fits the 32-bit loops: the vector kernels' terms.
inline bool VectorOk(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n <= 0 || n >= (int64_t{1} << 31)) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

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
// A reduction over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `warp_op` reduces within a warp; `identity` fills the unused slots. Safe to call
// repeatedly in one kernel (the first barrier guards the shared slots).
template <typename WarpOp>
__device__ inline float BlockReduce(float v, float identity, WarpOp warp_op) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_op(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = static_cast<int>(threadIdx.x) < warps ? partial[threadIdx.x] : identity;
  if (warp == 0) v = warp_op(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}
__device__ inline float BlockSum(float v) {
  return BlockReduce(v, 0.f, [](float x) { return WarpSum(x); });
}
__device__ inline float BlockMax(float v) {
  return BlockReduce(v, -INFINITY, [](float x) { return WarpMax(x); });
}

}  // namespace moe::kernels::cuda
