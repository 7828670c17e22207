// SwiGLU on a fused gate|up projection: gate_up [R, 2F] -> out [R, F] = silu(gate) * up; the
// backward writes dgate_up.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void SwigluForwardKernel(const T* gu, T* out, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]);
    out[i] = Cvt<T>(g / (1.f + expf(-g)) * u);
  }
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* gu, const T* dout, T* dgu, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]), dy = Ld(dout[i]);
    const float sig = 1.f / (1.f + expf(-g));
    dgu[r * 2 * f + f + j] = Cvt<T>(dy * g * sig);
    dgu[r * 2 * f + j] = Cvt<T>(dy * u * sig * (1.f + g * (1.f - sig)));
  }
}

}  // namespace

void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  CheckOnCuda({&gate_up, &out}, "SwigluForward");
  const int64_t rows = out.dim(0), f = out.dim(1);
  MOE_CUDA_TYPED(StorageType({&gate_up, &out}, "SwigluForward"), T, {
    if (rows * f > 0)
      SwigluForwardKernel<T>
          <<<Blocks(rows * f), kThreads, 0, Stream()>>>(Ptr<T>(gate_up), Ptr<T>(out), rows, f);
  });
  CheckLaunch("SwigluForward");
}

void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  CheckOnCuda({&gate_up, &dout, &dgate_up}, "SwigluBackward");
  const int64_t rows = dout.dim(0), f = dout.dim(1);
  MOE_CUDA_TYPED(StorageType({&gate_up, &dout, &dgate_up}, "SwigluBackward"), T, {
    if (rows * f > 0) {
      SwigluBackwardKernel<T><<<Blocks(rows * f), kThreads, 0, Stream()>>>(
          Ptr<T>(gate_up), Ptr<T>(dout), Ptr<T>(dgate_up), rows, f);
    }
  });
  CheckLaunch("SwigluBackward");
}

}  // namespace moe::kernels::cuda
