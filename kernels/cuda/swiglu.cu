// SwiGLU on a fused gate|up projection: gate_up [R, 2F] -> out [R, F] = silu(gate) * up; the
// backward writes dgate_up.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  CheckOnCuda({&gate_up, &out}, "SwigluForward");
  const int64_t rows = out.dim(0), f = out.dim(1);
  MOE_CUDA_TYPED(StorageType({&gate_up, &out}, "SwigluForward"), T, {
    constexpr int L = Vec16<T>::kLanes;
    if (f % L == 0 && VectorOk(rows * 2 * f, {gate_up.raw(), out.raw()})) {
      SwigluForwardVecKernel<T>
          <<<Blocks(rows * f / L), kThreads, 0, Stream()>>>(Ptr<T>(gate_up), Ptr<T>(out), rows, f);
    } else if (rows * f > 0) {
      SwigluForwardKernel<T>
          <<<Blocks(rows * f), kThreads, 0, Stream()>>>(Ptr<T>(gate_up), Ptr<T>(out), rows, f);
    }
  });
  CheckLaunch("SwigluForward");
}

void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  CheckOnCuda({&gate_up, &dout, &dgate_up}, "SwigluBackward");
  const int64_t rows = dout.dim(0), f = dout.dim(1);
  MOE_CUDA_TYPED(StorageType({&gate_up, &dout, &dgate_up}, "SwigluBackward"), T, {
    constexpr int L = Vec16<T>::kLanes;
    if (f % L == 0 && VectorOk(rows * 2 * f, {gate_up.raw(), dout.raw(), dgate_up.raw()})) {
      SwigluBackwardVecKernel<T><<<Blocks(rows * f / L), kThreads, 0, Stream()>>>(
          Ptr<T>(gate_up), Ptr<T>(dout), Ptr<T>(dgate_up), rows, f);
    } else if (rows * f > 0) {
      SwigluBackwardKernel<T><<<Blocks(rows * f), kThreads, 0, Stream()>>>(
          Ptr<T>(gate_up), Ptr<T>(dout), Ptr<T>(dgate_up), rows, f);
    }
  });
  CheckLaunch("SwigluBackward");
}

}  // namespace moe::kernels::cuda
