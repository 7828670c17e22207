// Causal multi-head attention through cuBLAS strided-batched GEMMs (one call per sequence, batched
// over heads) and a fused causal softmax; its backward the same way. probs [B, H, S, S] is saved.
#include <cublas_v2.h>

#include <cmath>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

cublasHandle_t AttnHandle(cudaStream_t s) {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr) MOE_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
  cublasSetStream(handle, s);
  return handle;
}

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, with element strides between items.
void BatchedGemm(cudaStream_t s, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                 int64_t stride_c, int64_t batch) {
  const cublasStatus_t st = cublasSgemmStridedBatched(
      AttnHandle(s), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &alpha, b, static_cast<int>(ldb), stride_b, a, static_cast<int>(lda), stride_a, &beta, c,
      static_cast<int>(ldc), stride_c, static_cast<int>(batch));
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasSgemmStridedBatched failed: " << static_cast<int>(st);
}

// One block per row of one (sequence, head): softmax over j <= i, zero above the diagonal.
__global__ void CausalSoftmaxKernel(float* p, int64_t s) {
  const int64_t row = blockIdx.x, i = row % s;
  float* r = p + row * s;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, r[j]);
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(r[j] - mx);
  sum = BlockSum(sum);
  const float inv = 1.f / sum;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) r[j] = j <= i ? expf(r[j] - mx) * inv : 0.f;
}

// dS = P * (dP - rowsum(P * dP)) * scale, in place on dP.
__global__ void SoftmaxBackwardKernel(const float* p, float* dp, int64_t s, float scale) {
  const int64_t row = blockIdx.x, i = row % s;
  const float* pr = p + row * s;
  float* dr = dp + row * s;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += pr[j] * dr[j];
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) dr[j] = j <= i ? pr[j] * (dr[j] - dot) * scale : 0.f;
}

}  // namespace

void AttentionForward(const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d, float* out, float* probs,
                      cudaStream_t s) {
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * width;
    float* p = probs + b * heads * seq * seq;
    BatchedGemm(s, false, true, seq, seq, d, scale, q, width, d, q + hd, width, d, 0.f, p, seq, seq * seq, heads);
  }
  CausalSoftmaxKernel<<<static_cast<unsigned>(batch * heads * seq), kThreads, 0, s>>>(probs, seq);
  for (int64_t b = 0; b < batch; ++b) {
    const float* v = qkv + b * seq * width + 2 * hd;
    BatchedGemm(s, false, false, seq, d, seq, 1.f, probs + b * heads * seq * seq, seq, seq * seq, v, width, d, 0.f,
                out + b * seq * hd, hd, d, heads);
  }
}

void AttentionBackward(const float* qkv, const float* probs, const float* dout, int64_t batch, int64_t seq, int64_t heads,
                       int64_t d, float* dqkv, float* scratch, cudaStream_t s) {
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const float* q = qkv + b * seq * width;
    const float* p = probs + b * heads * seq * seq;
    const float* g = dout + b * seq * hd;
    float* dq = dqkv + b * seq * width;
    // dV = P^T dO; dP = dO V^T (into scratch [H, S, S]).
    BatchedGemm(s, true, false, seq, d, seq, 1.f, p, seq, seq * seq, g, hd, d, 0.f, dq + 2 * hd, width, d, heads);
    BatchedGemm(s, false, true, seq, seq, d, 1.f, g, hd, d, q + 2 * hd, width, d, 0.f, scratch, seq, seq * seq, heads);
    SoftmaxBackwardKernel<<<static_cast<unsigned>(heads * seq), kThreads, 0, s>>>(p, scratch, seq, scale);
    // dQ = dS K; dK = dS^T Q.
    BatchedGemm(s, false, false, seq, d, seq, 1.f, scratch, seq, seq * seq, q + hd, width, d, 0.f, dq, width, d, heads);
    BatchedGemm(s, true, false, seq, d, seq, 1.f, scratch, seq, seq * seq, q, width, d, 0.f, dq + hd, width, d, heads);
  }
}

}  // namespace moe::kernels::cuda
