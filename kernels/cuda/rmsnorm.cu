// RMSNorm: x [R, D], w [D] -> y [R, D], rstd [R] (fp32), also fused with the residual add before
// it; the backward (with the residual's gradient added, or not) writes dx and accumulates dw
// (fp32; atomics across strips of rows: not bitwise reproducible, unlike the CPU path).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y,
                    const Tensor& rstd) {
  CheckOnCuda({&x, &w, &y, &rstd}, "RmsNormForward");
  CheckF32(rstd, "RmsNormForward", "rstd");
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CUDA_TYPED(StorageType({&x, &w, &y}, "RmsNormForward"), T, {
    if (rows > 0) {
      RmsNormForwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(
          Ptr<T>(x), Ptr<T>(w), static_cast<float>(eps), Ptr<T>(y), Ptr<float>(rstd), d);
    }
  });
  CheckLaunch("RmsNormForward");
}

void AddRmsNormForward(const Tensor& x, const Tensor& r, const Tensor& w, double eps,
                       const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  CheckOnCuda({&x, &r, &w, &sum, &y, &rstd}, "AddRmsNormForward");
  CheckF32(rstd, "AddRmsNormForward", "rstd");
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CUDA_TYPED(StorageType({&x, &r, &w, &sum, &y}, "AddRmsNormForward"), T, {
    if (rows > 0) {
      AddRmsNormForwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(
          Ptr<T>(x), Ptr<T>(r), Ptr<T>(w), static_cast<float>(eps), Ptr<T>(sum), Ptr<T>(y),
          Ptr<float>(rstd), d);
    }
  });
  CheckLaunch("AddRmsNormForward");
}

namespace {
void Backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& w,
              const Tensor& rstd, const Tensor& dres, const Tensor& dx, const Tensor& dw) {
  CheckOnCuda({&dy, &x, &w, &rstd, &dres, &dx, &dw}, op);
  CheckF32(rstd, op, "rstd");
  CheckF32(dw, op, "dw (a parameter gradient)");
  const int64_t rows = x.dim(0), d = x.dim(1);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  MOE_CUDA_TYPED(StorageType({&dy, &x, &w, &dres, &dx}, op), T, {
    if (rows > 0) {
      RmsNormBackwardKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(
          Ptr<T>(dy), Ptr<T>(x), Ptr<T>(w), Ptr<float>(rstd), Ptr<T>(dres), Ptr<T>(dx),
          Ptr<float>(dw), rows, d, kRowsPerBlock);
    }
  });
  CheckLaunch(op);
}
}  // namespace

void RmsNormBackwardAdd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dres, const Tensor& dx, const Tensor& dw) {
  Backward("RmsNormBackwardAdd", dy, x, w, rstd, dres, dx, dw);
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  Backward("RmsNormBackward", dy, x, w, rstd, Tensor(), dx, dw);
}

}  // namespace moe::kernels::cuda
