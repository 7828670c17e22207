// Shared by the CUDA family files (kernels/cuda/<family>.cu), on the host: the stream kernels run
// on, the device and dtype checks of the Tensor-level entry points and the scratch-partials helper
// (defined in runtime.cu). The device side (launch sizes, bf16 loads and stores, block reductions)
// is device_common.cuh, which the kernels' headers include.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "common/check.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels::cuda {

using bf16 = __nv_bfloat16;

// ---- Host side (runtime.cu) ----

// The stream every kernel, copy and library call of the current device runs on: the kernels' own
// (runtime.cu), never the legacy default stream; NCCL's communicators wait for it before each
// collective and it waits for their end (worker/engine/parallel/nccl_comm.cc).
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
// *dst += the partials' sum in double, on the device: in order by one thread for a few, by a
// block's fixed tree for many (the same on every run).
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

}  // namespace moe::kernels::cuda
