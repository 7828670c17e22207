// Causal multi-head attention through cuBLAS strided-batched GEMMs (one call per sequence, batched
// over heads; fp32 compute) and a fused causal softmax in fp32; its backward the same way.
// probs [B, H, S, S] is saved in the activation type.
#include <cublas_v2.h>

#include <cmath>
#include <type_traits>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t DataType() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, with element strides between items.
template <typename T>
void BatchedGemm(cudaStream_t s, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                 int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, float beta, T* c, int64_t ldc, int64_t stride_c,
                 int64_t batch) {
  const cudaDataType_t type = DataType<T>();
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      static_cast<cublasHandle_t>(CublasHandle(s)), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, type, static_cast<int>(ldb), stride_b, a, type,
      static_cast<int>(lda), stride_a, &beta, c, type, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmStridedBatchedEx failed: " << cublasGetStatusString(st);
}

// One block per row of one (sequence, head): softmax over j <= i, zero above the diagonal.
template <typename T>
__global__ void CausalSoftmaxKernel(T* p, int64_t s) {
  const int64_t row = blockIdx.x, i = row % s;
  T* r = p + row * s;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, Ld(r[j]));
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(Ld(r[j]) - mx);
  sum = BlockSum(sum);
  const float inv = 1.f / sum;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) r[j] = Cvt<T>(j <= i ? expf(Ld(r[j]) - mx) * inv : 0.f);
}

// dS = P * (dP - rowsum(P * dP)) * scale, in place on dP.
template <typename T>
__global__ void SoftmaxBackwardKernel(const T* p, T* dp, int64_t s, float scale) {
  const int64_t row = blockIdx.x, i = row % s;
  const T* pr = p + row * s;
  T* dr = dp + row * s;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += Ld(pr[j]) * Ld(dr[j]);
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) dr[j] = Cvt<T>(j <= i ? Ld(pr[j]) * (Ld(dr[j]) - dot) * scale : 0.f);
}

}  // namespace

template <typename T>
void AttentionForward(const T* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d, T* out, T* probs, cudaStream_t s) {
  if (batch * seq == 0) return;
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const T* q = qkv + b * seq * width;
    T* p = probs + b * heads * seq * seq;
    BatchedGemm<T>(s, false, true, seq, seq, d, scale, q, width, d, q + hd, width, d, 0.f, p, seq, seq * seq, heads);
  }
  CausalSoftmaxKernel<T><<<static_cast<unsigned>(batch * heads * seq), kThreads, 0, s>>>(probs, seq);
  for (int64_t b = 0; b < batch; ++b) {
    const T* v = qkv + b * seq * width + 2 * hd;
    BatchedGemm<T>(s, false, false, seq, d, seq, 1.f, probs + b * heads * seq * seq, seq, seq * seq, v, width, d, 0.f,
                   out + b * seq * hd, hd, d, heads);
  }
}

template <typename T>
void AttentionBackward(const T* qkv, const T* probs, const T* dout, int64_t batch, int64_t seq, int64_t heads, int64_t d,
                       T* dqkv, T* scratch, cudaStream_t s) {
  if (batch * seq == 0) return;
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const T* q = qkv + b * seq * width;
    const T* p = probs + b * heads * seq * seq;
    const T* g = dout + b * seq * hd;
    T* dq = dqkv + b * seq * width;
    // dV = P^T dO; dP = dO V^T (into scratch [H, S, S]).
    BatchedGemm<T>(s, true, false, seq, d, seq, 1.f, p, seq, seq * seq, g, hd, d, 0.f, dq + 2 * hd, width, d, heads);
    BatchedGemm<T>(s, false, true, seq, seq, d, 1.f, g, hd, d, q + 2 * hd, width, d, 0.f, scratch, seq, seq * seq, heads);
    SoftmaxBackwardKernel<T><<<static_cast<unsigned>(heads * seq), kThreads, 0, s>>>(p, scratch, seq, scale);
    // dQ = dS K; dK = dS^T Q.
    BatchedGemm<T>(s, false, false, seq, d, seq, 1.f, scratch, seq, seq * seq, q + hd, width, d, 0.f, dq, width, d, heads);
    BatchedGemm<T>(s, true, false, seq, d, seq, 1.f, scratch, seq, seq * seq, q, width, d, 0.f, dq + hd, width, d, heads);
  }
}
MOE_CUDA_INSTANTIATE(AttentionForward)
MOE_CUDA_INSTANTIATE(AttentionBackward)

}  // namespace moe::kernels::cuda
