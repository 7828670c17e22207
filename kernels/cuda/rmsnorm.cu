// RMSNorm: x [R, D], w [D] -> y [R, D], rstd [R] (fp32); the backward writes dx and accumulates dw
// (fp32; atomics across strips of rows: not bitwise reproducible, unlike the CPU path).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

// Rows of x each backward block sums dw over before its atomics.
constexpr int64_t kRowsPerBlock = 32;

template <typename T>
__global__ void RmsNormForwardKernel(const T* x, const T* w, float eps, T* y, float* rstd,
                                     int64_t d) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * d;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = Ld(xr[j]);
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y[r * d + j] = Cvt<T>(Ld(xr[j]) * inv * Ld(w[j]));
}

// One block per row writes dx; dw is summed over a strip of rows per block in registers, then added
// once per column (an atomic per column and block, not per element).
template <typename T>
__global__ void RmsNormBackwardKernel(const T* dy, const T* x, const T* w, const float* rstd, T* dx,
                                      float* dw, int64_t rows, int64_t d, int64_t rows_per_block) {
  const int64_t r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = dy + r * d;
    const T* xr = x + r * d;
    const float inv = rstd[r];
    float dot = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += Ld(g[j]) * Ld(w[j]) * Ld(xr[j]);
    dot = BlockSum(dot);
    const float coef = dot * inv * inv * inv / static_cast<float>(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      dx[r * d + j] = Cvt<T>(Ld(g[j]) * Ld(w[j]) * inv - Ld(xr[j]) * coef);
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) acc += Ld(dy[r * d + j]) * Ld(x[r * d + j]) * rstd[r];
    atomicAdd(&dw[j], acc);
  }
}

}  // namespace

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

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  CheckOnCuda({&dy, &x, &w, &rstd, &dx, &dw}, "RmsNormBackward");
  CheckF32(rstd, "RmsNormBackward", "rstd");
  CheckF32(dw, "RmsNormBackward", "dw (a parameter gradient)");
  const int64_t rows = x.dim(0), d = x.dim(1);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  MOE_CUDA_TYPED(StorageType({&dy, &x, &w, &dx}, "RmsNormBackward"), T, {
    if (rows > 0) {
      RmsNormBackwardKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, Stream()>>>(
          Ptr<T>(dy), Ptr<T>(x), Ptr<T>(w), Ptr<float>(rstd), Ptr<T>(dx), Ptr<float>(dw), rows, d,
          kRowsPerBlock);
    }
  });
  CheckLaunch("RmsNormBackward");
}

}  // namespace moe::kernels::cuda
