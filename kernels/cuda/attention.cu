// Causal multi-head attention through cuBLAS strided-batched GEMMs (one call per sequence, batched
// over heads; fp32 compute) and a fused causal softmax; its backward the same way. The scores and dP
// are fp32 ([H, S, S] scratch per sequence) whatever the activation type; probs [B, H, S, S] is saved
// in the activation type.
#include <cublas_v2.h>

#include <cmath>
#include <type_traits>

#include "common/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t DataType() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, with element strides between items.
// A and B are T; C is T or fp32 (the scores and dP stay fp32 in bf16 attention).
template <typename T, typename TC>
void BatchedGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
                 int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, float beta, TC* c, int64_t ldc, int64_t stride_c,
                 int64_t batch) {
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      static_cast<cublasHandle_t>(CublasHandle()), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, DataType<T>(), static_cast<int>(ldb), stride_b, a,
      DataType<T>(), static_cast<int>(lda), stride_a, &beta, c, DataType<TC>(), static_cast<int>(ldc), stride_c,
      static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  MOE_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasGemmStridedBatchedEx failed: " << cublasGetStatusString(st);
}

// One block per row of one (sequence, head): softmax of the fp32 scores over j <= i, zero above the
// diagonal, stored as T.
template <typename T>
__global__ void CausalSoftmaxKernel(const float* scores, T* p, int64_t s) {
  const int64_t row = blockIdx.x, i = row % s;
  const float* r = scores + row * s;
  T* out = p + row * s;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, r[j]);
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(r[j] - mx);
  sum = BlockSum(sum);
  const float inv = 1.f / sum;
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) out[j] = Cvt<T>(j <= i ? expf(r[j] - mx) * inv : 0.f);
}

// dS = P * (dP - rowsum(P * dP)) * scale, from fp32 dP into T.
template <typename T>
__global__ void SoftmaxBackwardKernel(const T* p, const float* dp, T* ds, int64_t s, float scale) {
  const int64_t row = blockIdx.x, i = row % s;
  const T* pr = p + row * s;
  const float* dr = dp + row * s;
  T* out = ds + row * s;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += Ld(pr[j]) * dr[j];
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) out[j] = Cvt<T>(j <= i ? Ld(pr[j]) * (dr[j] - dot) * scale : 0.f);
}

// qkv [B*S, 3*H*d] -> out [B*S, H*d], probs [B, H, S, S]; the scores go through `scores`, fp32 scratch
// of H*S*S.
template <typename T>
void Forward(const T* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d, T* out, T* probs, float* scores) {
  if (batch * seq == 0) return;
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const T* q = qkv + b * seq * width;
    T* p = probs + b * heads * seq * seq;
    BatchedGemm<T, float>(false, true, seq, seq, d, scale, q, width, d, q + hd, width, d, 0.f, scores, seq, seq * seq, heads);
    CausalSoftmaxKernel<T><<<static_cast<unsigned>(heads * seq), kThreads, 0, Stream()>>>(scores, p, seq);
    BatchedGemm<T, T>(false, false, seq, d, seq, 1.f, p, seq, seq * seq, q + 2 * hd, width, d, 0.f, out + b * seq * hd, hd, d,
                      heads);
  }
}

// Writes all of dqkv. dP goes through `dp` (fp32, H*S*S) and dS through `ds` (H*S*S of T).
template <typename T>
void Backward(const T* qkv, const T* probs, const T* dout, int64_t batch, int64_t seq, int64_t heads, int64_t d, T* dqkv,
              float* dp, T* ds) {
  if (batch * seq == 0) return;
  const int64_t hd = heads * d, width = 3 * hd;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < batch; ++b) {
    const T* q = qkv + b * seq * width;
    const T* p = probs + b * heads * seq * seq;
    const T* g = dout + b * seq * hd;
    T* dq = dqkv + b * seq * width;
    // dV = P^T dO; dP = dO V^T (fp32, [H, S, S]); dS from P and dP.
    BatchedGemm<T, T>(true, false, seq, d, seq, 1.f, p, seq, seq * seq, g, hd, d, 0.f, dq + 2 * hd, width, d, heads);
    BatchedGemm<T, float>(false, true, seq, seq, d, 1.f, g, hd, d, q + 2 * hd, width, d, 0.f, dp, seq, seq * seq, heads);
    SoftmaxBackwardKernel<T><<<static_cast<unsigned>(heads * seq), kThreads, 0, Stream()>>>(p, dp, ds, seq, scale);
    // dQ = dS K; dK = dS^T Q.
    BatchedGemm<T, T>(false, false, seq, d, seq, 1.f, ds, seq, seq * seq, q + hd, width, d, 0.f, dq, width, d, heads);
    BatchedGemm<T, T>(true, false, seq, d, seq, 1.f, ds, seq, seq * seq, q, width, d, 0.f, dq + hd, width, d, heads);
  }
}

}  // namespace

void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim, const Tensor& out,
                      const Tensor& probs) {
  CheckOnCuda({&qkv, &out, &probs}, "AttentionForward");
  Tensor scores = Tensor::Empty({heads, seq_len, seq_len}, DType::kF32, qkv.device());
  MOE_CUDA_TYPED(StorageType({&qkv, &out, &probs}, "AttentionForward"), T,
                 Forward<T>(Ptr<T>(qkv), batch, seq_len, heads, head_dim, Ptr<T>(out), Ptr<T>(probs), Ptr<float>(scores)));
  CheckLaunch("AttentionForward");
}

void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv) {
  CheckOnCuda({&qkv, &probs, &dout, &dqkv}, "AttentionBackward");
  const DType d = StorageType({&qkv, &probs, &dout, &dqkv}, "AttentionBackward");
  Tensor dp = Tensor::Empty({heads, seq_len, seq_len}, DType::kF32, qkv.device());
  Tensor ds = Tensor::Empty({heads, seq_len, seq_len}, d, qkv.device());
  MOE_CUDA_TYPED(d, T,
                 Backward<T>(Ptr<T>(qkv), Ptr<T>(probs), Ptr<T>(dout), batch, seq_len, heads, head_dim, Ptr<T>(dqkv),
                             Ptr<float>(dp), Ptr<T>(ds)));
  CheckLaunch("AttentionBackward");
}

}  // namespace moe::kernels::cuda
