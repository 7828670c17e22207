// Shared by the CUDA family files (kernels/cuda/<family>.cu): on the host, the stream kernels run
// on, the device and dtype checks of the Tensor-level entry points and the scratch-partials helper
// (defined in runtime.cu); on the device, launch sizes, bf16 loads and stores, block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "common/check.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels::cuda {

using bf16 = __nv_bfloat16;

// ---- Host side (runtime.cu) ----

// The stream every kernel runs on: the legacy default stream, which NCCL's communicator waits for
// before each collective.
cudaStream_t Stream();
// The last CUDA error's text, or "" on success (and clears it).
std::string LastError();
// RegisterCudaAllocator and CurrentDevice: cuda_backend.h.
// The cuBLAS handle of this thread (created once, on the device current then), bound to Stream().
void* CublasHandle();
// Runs `launch` with a device buffer of n floats (one partial per row, sequence, ...), then adds
// the partials on the host in a fixed order. The buffer comes from the caching allocator: no
// cudaMalloc on the training path once warm. Under a DeviceSumTarget (cuda_backend.h) the total is
// added to its device double instead (no host read) and 0 returned.
double SumPartials(int64_t n, const std::function<void(float*)>& launch);
// *dst += the partials' sum, in order, in double, on the device (one thread; n is small).
void AddPartialsOnDevice(const float* partial, int64_t n, double* dst);
void AddPartialsOnDevice(const double* partial, int64_t n, double* dst);
double* CurrentDeviceSumTarget();

// Checks of a Tensor-level entry point named `op`: every defined tensor is on CUDA; the storage
// type all of `tensors` share (f32 or bf16); a tensor that must be f32 whatever the activations
// are.
void CheckOnCuda(std::initializer_list<const Tensor*> tensors, const char* op);
DType StorageType(std::initializer_list<const Tensor*> tensors, const char* op);
void CheckF32(const Tensor& t, const char* op, const char* what);
// Fails with `op` and the CUDA error's text when a launch went wrong.
void CheckLaunch(const char* op);
// The device word where kernels record the kinds of index they found out of range
// (kernels/runtime.h BadIndexKind; allocated and zeroed on first use; FoldBadIndices moves it into
// the step's buffer).
unsigned* BadIndexFlags();

inline cudaDataType_t CudaType(DType d) { return d == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }

// A tensor's data as T* (nullptr for an undefined tensor); T is a device type (bf16 for kBF16).
template <typename T>
T* Ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw()) : nullptr;
}

// Calls BODY with T bound to the storage type of `dtype`: float or bf16.
#define MOE_CUDA_TYPED(dtype, T, ...)       \
  do {                                      \
    if ((dtype) == ::moe::DType::kBF16) {   \
      using T = ::moe::kernels::cuda::bf16; \
      __VA_ARGS__;                          \
    } else {                                \
      using T = float;                      \
      __VA_ARGS__;                          \
    }                                       \
  } while (0)

// ---- Device side ----

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
  v = threadIdx.x < warps ? partial[threadIdx.x] : identity;
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
