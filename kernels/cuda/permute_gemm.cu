// The MoE dispatch helpers (gather-sum, weighted combine and its backward) and GEMMs through cuBLAS.
#include <cublas_v2.h>

#include <mutex>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

__global__ void PermuteBackwardKernel(const float* dxp, const int32_t* rows, float* dx, int64_t tokens, int64_t k, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < tokens * d; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / d, c = i % d;
    float s = 0;
    for (int64_t j = 0; j < k; ++j) s += dxp[static_cast<int64_t>(rows[t * k + j]) * d + c];
    dx[i] = s;
  }
}

__global__ void CombineForwardKernel(const float* yp, const int32_t* rows, const float* w, float* y, int64_t tokens, int64_t k,
                                     int64_t d) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < tokens * d; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / d, c = i % d;
    float s = y[i];
    for (int64_t j = 0; j < k; ++j) s += w[t * k + j] * yp[static_cast<int64_t>(rows[t * k + j]) * d + c];
    y[i] = s;
  }
}

// One block per (token, choice): the weight's gradient is a dot product over the row.
__global__ void CombineBackwardKernel(const float* dy, const float* yp, const int32_t* rows, const float* w, float* dyp,
                                      float* dw, int64_t k, int64_t d) {
  const int64_t slot = blockIdx.x, t = slot / k;
  const int64_t row = rows[slot];
  const float wt = w[slot];
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float g = dy[t * d + c];
    dot += g * yp[row * d + c];
    dyp[row * d + c] = wt * g;
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dw[slot] = dot;
}

cublasHandle_t Handle(cudaStream_t s) {
  static std::mutex mu;
  static cublasHandle_t handle = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (handle == nullptr) MOE_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
  cublasSetStream(handle, s);
  return handle;
}

}  // namespace

void PermuteBackward(const float* dxp, const int32_t* row_of_slot, float* dx, int64_t tokens, int64_t k, int64_t d,
                     cudaStream_t s) {
  PermuteBackwardKernel<<<Blocks(tokens * d), kThreads, 0, s>>>(dxp, row_of_slot, dx, tokens, k, d);
}
void CombineForward(const float* yp, const int32_t* row_of_slot, const float* w, float* y, int64_t tokens, int64_t k,
                    int64_t d, cudaStream_t s) {
  CombineForwardKernel<<<Blocks(tokens * d), kThreads, 0, s>>>(yp, row_of_slot, w, y, tokens, k, d);
}
void CombineBackward(const float* dy, const float* yp, const int32_t* row_of_slot, const float* w, float* dyp, float* dw,
                     int64_t tokens, int64_t k, int64_t d, cudaStream_t s) {
  if (tokens * k > 0) CombineBackwardKernel<<<static_cast<unsigned>(tokens * k), kThreads, 0, s>>>(dy, yp, row_of_slot, w, dyp, dw, k, d);
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, cudaStream_t s) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasStatus_t st = cublasSgemm(Handle(s), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                                        static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc));
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasSgemm failed: " << static_cast<int>(st);
}

void GroupedGemm(const float* x, const float* w, const std::vector<int64_t>& offsets, float* y, int64_t n, int64_t k,
                 cudaStream_t s) {
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    if (rows == 0) continue;
    Gemm(false, true, rows, n, k, 1.f, x + r0 * k, k, w + static_cast<int64_t>(g) * n * k, k, 0.f, y + r0 * n, n, s);
  }
}

}  // namespace moe::kernels::cuda
