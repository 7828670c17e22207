// CUDA paths of the kernel families on raw device pointers and a stream: the launchers behind the
// Tensor-level entry points of kernels/cuda/ops.h. T is the storage type of activations and weights,
// float or __nv_bfloat16; every kernel loads T, computes and accumulates in fp32 and stores T.
// Accumulated parameter gradients (dw of RMSNorm, the embedding table's) and RMSNorm's rstd are fp32
// whatever T is; the router family and AdamW are fp32 only (the router GEMM writes fp32 logits, as
// DeepSeek-V3 routes in fp32; AdamW updates the fp32 master weights).
// Each family has its CPU reference in kernels/<family>.h; tests/gpu/kernel_check.cc compares them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moe::kernels::cuda {

using bf16 = __nv_bfloat16;

// Returns the last CUDA error's text, or "" on success (and clears it).
std::string LastError();
void RegisterCudaAllocator();  // Tensor memory on DeviceType::kCuda through a caching allocator

// Elementwise, reductions, gathers, conversions.
template <typename T> void Fill(T* x, int64_t n, float value, cudaStream_t s);
template <typename T> void Axpy(T* y, float alpha, const T* x, int64_t n, cudaStream_t s);
template <typename T> void Add(T* out, const T* a, const T* b, int64_t n, cudaStream_t s);
template <typename T> void Scale(T* x, float alpha, int64_t n, cudaStream_t s);
// Sum of squares: fp64 partials per block, added on the host in a fixed order.
template <typename T> double SumSquares(const T* x, int64_t n, cudaStream_t s);
// dst[r] = src[index[r]] for rows of row_bytes bytes (any dtype).
void GatherRows(const void* src, const int32_t* index, void* dst, int64_t rows, int64_t row_bytes, cudaStream_t s);
void ConvertF32ToBf16(const float* src, bf16* dst, int64_t n, cudaStream_t s);
void ConvertBf16ToF32(const bf16* src, float* dst, int64_t n, cudaStream_t s);

// RMSNorm: x [R, D], w [D] -> y [R, D], rstd [R] (fp32); backward writes dx, accumulates dw (fp32; atomics
// across strips of rows: not bitwise reproducible, unlike the CPU path).
template <typename T>
void RmsNormForward(const T* x, const T* w, float eps, T* y, float* rstd, int64_t rows, int64_t d, cudaStream_t s);
template <typename T>
void RmsNormBackward(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* dw, int64_t rows, int64_t d,
                     cudaStream_t s);

// RoPE on the q and k parts of qkv [T, 3*H*d], in place; inverse = backward.
template <typename T>
void Rope(T* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse, cudaStream_t s);

// SwiGLU: gate_up [R, 2F] -> out [R, F]; backward writes dgate_up.
template <typename T> void SwigluForward(const T* gate_up, T* out, int64_t rows, int64_t f, cudaStream_t s);
template <typename T>
void SwigluBackward(const T* gate_up, const T* dout, T* dgate_up, int64_t rows, int64_t f, cudaStream_t s);

// Cross-entropy fused with softmax: logits [T, V], targets [T]; dlogits may alias logits or be null.
template <typename T>
double CrossEntropy(const T* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale, T* dlogits,
                    cudaStream_t s);

// AdamW on fp32 master weights, decoupled weight decay, bias-corrected (step is 1-based).
void AdamW(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, int64_t step, float grad_scale, cudaStream_t s);

// Dispatch helpers: PermuteBackward (dx[t] = sum_j dxp[row_of_slot[t,j]]), CombineForward
// (y[t] += sum_j w[t,j] yp[row]) and CombineBackward (dyp[row] = w dy[t]; dw = <dy[t], yp[row]>).
template <typename T>
void PermuteBackward(const T* dxp, const int32_t* row_of_slot, T* dx, int64_t tokens, int64_t k, int64_t d, cudaStream_t s);
template <typename T>
void CombineForward(const T* yp, const int32_t* row_of_slot, const T* w, T* y, int64_t tokens, int64_t k, int64_t d,
                    cudaStream_t s);
template <typename T>
void CombineBackward(const T* dy, const T* yp, const int32_t* row_of_slot, const T* w, T* dyp, T* dw, int64_t tokens,
                     int64_t k, int64_t d, cudaStream_t s);

// Embedding: out[t] = table[ids[t]]; the backward scatter-adds into an fp32 table gradient (atomics:
// not bitwise reproducible).
template <typename T> void EmbeddingForward(const T* table, const int32_t* ids, T* out, int64_t tokens, int64_t d, cudaStream_t s);
template <typename T>
void EmbeddingBackward(const T* dout, const int32_t* ids, float* dtable, int64_t tokens, int64_t d, cudaStream_t s);

// DeepSeek-V3 routing (fp32) as kernels/router.h describes it; false when experts > 512 or groups > 64.
bool RouterForward(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k, int64_t groups,
                   int64_t topk_groups, bool sigmoid, float route_scale, bool use_bias, float* scores, int32_t* topk_idx,
                   float* topk_w, cudaStream_t s);
bool RouterBackward(const float* scores, const int32_t* topk_idx, const float* dtopk_w, const float* dscores_extra,
                    int64_t tokens, int64_t experts, int64_t top_k, bool sigmoid, float route_scale, float* dlogits,
                    cudaStream_t s);
// The sequence-wise balance loss; adds its gradient to dscores when that is not null.
double SeqAuxLoss(const float* scores, const int32_t* topk_idx, int64_t num_seqs, int64_t seq_len, int64_t experts,
                  int64_t top_k, float coeff, float* dscores, cudaStream_t s);

// Causal attention: qkv [B*S, 3*H*d] -> out [B*S, H*d], probs [B, H, S, S]; the backward writes all of
// dqkv. The scores (forward) and dP (backward) are fp32 in `scores` / `dp` scratch of H*S*S floats; the
// backward's dS goes through `ds`, H*S*S elements of T.
template <typename T>
void AttentionForward(const T* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d, T* out, T* probs, float* scores,
                      cudaStream_t s);
template <typename T>
void AttentionBackward(const T* qkv, const T* probs, const T* dout, int64_t batch, int64_t seq, int64_t heads, int64_t d,
                       T* dqkv, float* dp, T* ds, cudaStream_t s);

// Row-major GEMM through cuBLAS (cublasGemmEx, fp32 compute): C = alpha op(A) op(B) + beta C. A and B
// share one type (CUDA_R_32F or CUDA_R_16BF); C may be either (bf16 inputs into an fp32 C: weight
// gradients and fp32 logits).
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, cudaDataType_t ab_type, float beta, void* c, int64_t ldc, cudaDataType_t c_type,
          cudaStream_t s);
// The cuBLAS handle of this thread's device (created once, bound to stream s).
void* CublasHandle(cudaStream_t s);

}  // namespace moe::kernels::cuda
