// The device dispatch of the kernel families (kernels/<family>.cc, private to kernels/): after the
// checks both devices share, a call runs on the backend of the device its output tensor lives on.
#pragma once

#include "common/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/tensor.h"

namespace moe::kernels {

// A CUDA tensor reaching a build without CUDA kernels: fails, saying so.
inline void CheckNotCuda(const Tensor& t) {
  MOE_CHECK(!t.device().is_cuda()) << "a " << t.device().ToString()
                                   << " tensor, but this build has no CUDA kernels (configured without nvcc)";
}

}  // namespace moe::kernels

// Evaluates `call` (a family function's name and arguments, e.g. Scale(t, s)) on the backend of tensor
// `t`'s device: moe::kernels::cuda::call when t is a CUDA tensor, else moe::kernels::cpu::call. Its
// value is the call's, so `return MOE_DISPATCH(...)` suits void and value-returning functions alike.
// Without MOE_WITH_CUDA the CUDA branch is not compiled and a CUDA tensor fails CheckNotCuda.
#ifdef MOE_WITH_CUDA
#define MOE_DISPATCH(t, call) ((t).device().is_cuda() ? ::moe::kernels::cuda::call : ::moe::kernels::cpu::call)
#else
#define MOE_DISPATCH(t, call) (::moe::kernels::CheckNotCuda(t), ::moe::kernels::cpu::call)
#endif
