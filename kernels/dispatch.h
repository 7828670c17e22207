// The device dispatch of the kernel families (kernels/<family>.cc, private to kernels/): after the
// checks both devices share, a call runs on the backend of the device its output tensor lives on.
//
// Each entry point is declared once, in its family's header. A backend defines a function of the
// same name and type in namespace cpu or cuda (kernels/cpu/<family>.cc, kernels/cuda/<family>.cu)
// without seeing that header (it takes its types from kernels/kernel_types.h: no arrow up from a
// backend); the dispatch file declares the twins it calls from the public declaration's own type:
//   MOE_KERNEL_BACKENDS(RmsNormForward)   // cpu::RmsNormForward and cuda::RmsNormForward
// so a signature is written once, and a backend whose definition drifts from it fails to link
// (C++ mangles the parameter types).
#pragma once

#include "common/check.h"
#include "kernels/cuda_backend.h"
#include "kernels/tensor.h"

#define MOE_CPU_KERNEL(name)           \
  namespace cpu {                      \
  decltype(::moe::kernels::name) name; \
  }
#define MOE_CUDA_KERNEL(name)          \
  namespace cuda {                     \
  decltype(::moe::kernels::name) name; \
  }
#define MOE_KERNEL_BACKENDS(name) MOE_CPU_KERNEL(name) MOE_CUDA_KERNEL(name)

namespace moe::kernels {

// A CUDA tensor reaching a build without CUDA kernels: fails, saying so.
inline void CheckNotCuda(const Tensor& t) {
  MOE_CHECK(!t.device().is_cuda())
      << "a " << t.device().ToString()
      << " tensor, but this build has no CUDA kernels (configured without nvcc)";
}

// Checks acc (f64 [n] on `device`, slot < n) and runs `host_value` so that its value lands in
// acc[slot]: on the CPU it is added there; on CUDA the family's partial sums are added on the
// device (cuda::DeviceSumTarget), and host_value's return is 0 with no host read. `op` names the
// caller.
template <typename Fn>
void AddToSlot(const Tensor& acc, int64_t slot, Device device, const char* op, Fn&& host_value) {
  MOE_CHECK(acc.dtype() == DType::kF64 && acc.ndim() == 1 && slot >= 0 && slot < acc.numel() &&
            acc.device() == device)
      << op << ": the accumulator must be f64 [n] on " << device.ToString()
      << " with slot < n, got " << DTypeName(acc.dtype()) << acc.ShapeString() << " on "
      << acc.device().ToString() << ", slot " << slot;
#ifdef MOE_WITH_CUDA
  if (device.is_cuda()) {
    cuda::DeviceSumTarget into(static_cast<double*>(acc.raw()) + slot);
    host_value();
    return;
  }
#endif
  static_cast<double*>(acc.raw())[slot] += host_value();
}

}  // namespace moe::kernels

// Evaluates `call` (a family function's name and arguments, e.g. Scale(t, s)) on the backend of
// tensor `t`'s device: moe::kernels::cuda::call when t is a CUDA tensor, else
// moe::kernels::cpu::call. Its value is the call's, so `return MOE_DISPATCH(...)` suits void and
// value-returning functions alike. Without MOE_WITH_CUDA the CUDA branch is not compiled and a CUDA
// tensor fails CheckNotCuda.
#ifdef MOE_WITH_CUDA
#define MOE_DISPATCH(t, call) \
  ((t).device().is_cuda() ? ::moe::kernels::cuda::call : ::moe::kernels::cpu::call)
#else
#define MOE_DISPATCH(t, call) (::moe::kernels::CheckNotCuda(t), ::moe::kernels::cpu::call)
#endif
