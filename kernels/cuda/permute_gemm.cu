// The MoE dispatch helpers (gather-sum, weighted combine and its backward) and GEMMs through cuBLAS.
#include <cublas_v2.h>

#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void PermuteBackwardKernel(const T* dxp, const int32_t* rows, T* dx, int64_t tokens, int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = 0;
    for (int64_t j = 0; j < k; ++j) s += Ld(dxp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    dx[i] = Cvt<T>(s);
  }
}

template <typename T>
__global__ void CombineForwardKernel(const T* yp, const int32_t* rows, const T* w, T* y, int64_t tokens, int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = Ld(y[i]);
    for (int64_t j = 0; j < k; ++j) s += Ld(w[t * k + j]) * Ld(yp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    y[i] = Cvt<T>(s);
  }
}

// One block per (token, choice): the weight's gradient is a dot product over the row.
template <typename T>
__global__ void CombineBackwardKernel(const T* dy, const T* yp, const int32_t* rows, const T* w, T* dyp, T* dw, int64_t k,
                                      int64_t d) {
  const int64_t slot = blockIdx.x, t = slot / k;
  const int64_t row = rows[slot];
  const float wt = Ld(w[slot]);
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float g = Ld(dy[t * d + c]);
    dot += g * Ld(yp[row * d + c]);
    dyp[row * d + c] = Cvt<T>(wt * g);
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dw[slot] = Cvt<T>(dot);
}

}  // namespace

void* CublasHandle(cudaStream_t s) {
  // One handle per thread (cuBLAS handles are not thread-safe), bound to the device current when the
  // thread first asks; a training process drives one device.
  thread_local cublasHandle_t handle = nullptr;
  if (handle == nullptr) MOE_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
  cublasSetStream(handle, s);
  return handle;
}

template <typename T>
void PermuteBackward(const T* dxp, const int32_t* row_of_slot, T* dx, int64_t tokens, int64_t k, int64_t d, cudaStream_t s) {
  if (tokens * d > 0) PermuteBackwardKernel<T><<<Blocks(tokens * d), kThreads, 0, s>>>(dxp, row_of_slot, dx, tokens, k, d);
}
template <typename T>
void CombineForward(const T* yp, const int32_t* row_of_slot, const T* w, T* y, int64_t tokens, int64_t k, int64_t d,
                    cudaStream_t s) {
  if (tokens * d > 0) CombineForwardKernel<T><<<Blocks(tokens * d), kThreads, 0, s>>>(yp, row_of_slot, w, y, tokens, k, d);
}
template <typename T>
void CombineBackward(const T* dy, const T* yp, const int32_t* row_of_slot, const T* w, T* dyp, T* dw, int64_t tokens,
                     int64_t k, int64_t d, cudaStream_t s) {
  if (tokens * k > 0) {
    CombineBackwardKernel<T><<<static_cast<unsigned>(tokens * k), kThreads, 0, s>>>(dy, yp, row_of_slot, w, dyp, dw, k, d);
  }
}
MOE_CUDA_INSTANTIATE(PermuteBackward)
MOE_CUDA_INSTANTIATE(CombineForward)
MOE_CUDA_INSTANTIATE(CombineBackward)

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, cudaDataType_t ab_type, float beta, void* c, int64_t ldc, cudaDataType_t c_type,
          cudaStream_t s) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. k == 0 makes
  // a leading dimension 0, which cuBLAS rejects: it is a scale of C by beta (cuBLAS does that with
  // valid leading dimensions).
  lda = std::max<int64_t>(lda, 1);
  ldb = std::max<int64_t>(ldb, 1);
  const cublasStatus_t st = cublasGemmEx(
      static_cast<cublasHandle_t>(CublasHandle(s)), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ab_type, static_cast<int>(ldb), a, ab_type,
      static_cast<int>(lda), &beta, c, c_type, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmEx failed: " << cublasGetStatusString(st) << " (m " << m << ", n " << n
                                         << ", k " << k << ")";
}

}  // namespace moe::kernels::cuda
