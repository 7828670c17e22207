// CUDA paths of the kernel families (fp32 for now), on raw device pointers and a stream. Each has the
// CPU reference of its family (kernels/<family>.h) and is checked against it by tests/gpu/check.sh.
// Not yet here: the bf16 variants, a fused flash-style attention, and
// the engine's use of these paths (the trainer runs on the CPU path); see docs/architecture.md.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moe::kernels::cuda {

// Throws nothing: returns the CUDA error's text, or "" on success. Callers turn it into a Status.
std::string LastError();
void RegisterCudaAllocator();  // Tensor memory on DeviceType::kCuda through a caching allocator

// Elementwise, reductions, gathers.
void Fill(float* x, int64_t n, float value, cudaStream_t s);
void Axpy(float* y, float alpha, const float* x, int64_t n, cudaStream_t s);
void Scale(float* x, float alpha, int64_t n, cudaStream_t s);
double SumSquares(const float* x, int64_t n, cudaStream_t s);
void GatherRows(const float* src, const int32_t* index, float* dst, int64_t rows, int64_t d, cudaStream_t s);

// RMSNorm: x [R, D], w [D] -> y [R, D], rstd [R]; backward writes dx, accumulates dw.
void RmsNormForward(const float* x, const float* w, float eps, float* y, float* rstd, int64_t rows, int64_t d, cudaStream_t s);
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw, int64_t rows,
                     int64_t d, cudaStream_t s);

// RoPE on the q and k parts of qkv [T, 3*H*d], in place; inverse = backward.
void Rope(float* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse,
          cudaStream_t s);

// SwiGLU: gate_up [R, 2F] -> out [R, F]; backward writes dgate_up.
void SwigluForward(const float* gate_up, float* out, int64_t rows, int64_t f, cudaStream_t s);
void SwigluBackward(const float* gate_up, const float* dout, float* dgate_up, int64_t rows, int64_t f, cudaStream_t s);

// Cross-entropy fused with softmax: logits [T, V], targets [T]; dlogits may alias logits or be null.
double CrossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                    float* dlogits, cudaStream_t s);

// AdamW, decoupled weight decay, bias-corrected (step is 1-based).
void AdamW(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, int64_t step, float grad_scale, cudaStream_t s);

// Dispatch helpers: PermuteBackward (dx[t] = sum_j dxp[row_of_slot[t,j]]), CombineForward
// (y[t] += sum_j w[t,j] yp[row]) and CombineBackward (dyp[row] = w dy[t]; dw = <dy[t], yp[row]>).
void PermuteBackward(const float* dxp, const int32_t* row_of_slot, float* dx, int64_t tokens, int64_t k, int64_t d,
                     cudaStream_t s);
void CombineForward(const float* yp, const int32_t* row_of_slot, const float* w, float* y, int64_t tokens, int64_t k,
                    int64_t d, cudaStream_t s);
void CombineBackward(const float* dy, const float* yp, const int32_t* row_of_slot, const float* w, float* dyp, float* dw,
                     int64_t tokens, int64_t k, int64_t d, cudaStream_t s);

// Embedding: out[t] = table[ids[t]]; the backward scatter-adds (atomics: not bitwise reproducible).
void EmbeddingForward(const float* table, const int32_t* ids, float* out, int64_t tokens, int64_t d, cudaStream_t s);
void EmbeddingBackward(const float* dout, const int32_t* ids, float* dtable, int64_t tokens, int64_t d, cudaStream_t s);

// DeepSeek-V3 routing as kernels/router.h describes it; false when experts > 512 or groups > 64.
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
// dqkv and needs a scratch of H*S*S floats.
void AttentionForward(const float* qkv, int64_t batch, int64_t seq, int64_t heads, int64_t d, float* out, float* probs,
                      cudaStream_t s);
void AttentionBackward(const float* qkv, const float* probs, const float* dout, int64_t batch, int64_t seq, int64_t heads,
                       int64_t d, float* dqkv, float* scratch, cudaStream_t s);

// Row-major GEMM through cuBLAS: C = alpha op(A) op(B) + beta C. And grouped over experts: group g
// owns rows [offsets[g], offsets[g+1]) of x [R, K]; y[rows] = x[rows] w[g]^T with w [G, N, K].
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc, cudaStream_t s);
void GroupedGemm(const float* x, const float* w, const std::vector<int64_t>& offsets, float* y, int64_t n, int64_t k,
                 cudaStream_t s);

}  // namespace moe::kernels::cuda
