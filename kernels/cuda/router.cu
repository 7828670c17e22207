// Embedding lookup and its gradient; DeepSeek-V3 routing (scores, biased group-limited top-k,
// weights) and its backward; the sequence-wise balance loss.
#include <cmath>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kMaxExperts = 512;

template <typename T>
__global__ void EmbeddingForwardKernel(const T* table, const int32_t* ids, T* out, int64_t tokens, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) out[i] = table[static_cast<int64_t>(ids[i / d]) * d + i % d];
}
template <typename T>
__global__ void EmbeddingBackwardKernel(const T* dout, const int32_t* ids, float* dtable, int64_t tokens, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) atomicAdd(&dtable[static_cast<int64_t>(ids[i / d]) * d + i % d], Ld(dout[i]));
}

// One thread per token (E <= kMaxExperts). Ties go to the lower index, as on the CPU.
__global__ void RouteKernel(const float* logits, const float* bias, int64_t tokens, int64_t e, int64_t k, int64_t groups,
                            int64_t topk_groups, bool sigmoid, float route_scale, bool use_bias, float* scores, int32_t* idx,
                            float* w) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= tokens) return;
  const float* x = logits + t * e;
  float* s = scores + t * e;
  if (sigmoid) {
    for (int64_t i = 0; i < e; ++i) s[i] = 1.f / (1.f + expf(-x[i]));
  } else {
    float mx = x[0], sum = 0;
    for (int64_t i = 1; i < e; ++i) mx = fmaxf(mx, x[i]);
    for (int64_t i = 0; i < e; ++i) sum += (s[i] = expf(x[i] - mx));
    for (int64_t i = 0; i < e; ++i) s[i] /= sum;
  }
  float sel[kMaxExperts];
  for (int64_t i = 0; i < e; ++i) sel[i] = s[i] + (use_bias ? bias[i] : 0.f);
  if (groups > 1) {
    const int64_t per = e / groups;
    float gscore[64];
    bool kept[64];
    for (int64_t g = 0; g < groups; ++g) {
      float a = -INFINITY, c = -INFINITY;
      for (int64_t i = 0; i < per; ++i) {
        const float v = sel[g * per + i];
        if (v > a) { c = a; a = v; } else if (v > c) { c = v; }
      }
      gscore[g] = (use_bias && per >= 2) ? a + c : a;
      kept[g] = false;
    }
    for (int64_t r = 0; r < topk_groups; ++r) {
      int64_t best = -1;
      for (int64_t g = 0; g < groups; ++g) if (!kept[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
      kept[best] = true;
    }
    for (int64_t i = 0; i < e; ++i) if (!kept[i / per]) sel[i] = -INFINITY;
  }
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t i = 0; i < e; ++i) {
      bool taken = false;
      for (int64_t q = 0; q < j; ++q) taken |= idx[t * k + q] == i;
      if (!taken && (best < 0 || sel[i] > sel[best])) best = i;
    }
    idx[t * k + j] = static_cast<int32_t>(best);
    sum += (w[t * k + j] = s[best]);
  }
  for (int64_t j = 0; j < k; ++j) w[t * k + j] = (sigmoid ? w[t * k + j] / sum : w[t * k + j]) * route_scale;
}

__global__ void RouteBackwardKernel(const float* scores, const int32_t* idx, const float* dw, const float* dextra, int64_t tokens,
                                    int64_t e, int64_t k, bool sigmoid, float route_scale, float* dlogits) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= tokens) return;
  const float* s = scores + t * e;
  float ds[kMaxExperts];
  for (int64_t i = 0; i < e; ++i) ds[i] = dextra != nullptr ? dextra[t * e + i] : 0.f;
  if (sigmoid) {
    float sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) { sum += s[idx[t * k + j]]; dot += dw[t * k + j] * s[idx[t * k + j]]; }
    for (int64_t j = 0; j < k; ++j) ds[idx[t * k + j]] += route_scale * (dw[t * k + j] / sum - dot / (sum * sum));
  } else {
    for (int64_t j = 0; j < k; ++j) ds[idx[t * k + j]] += route_scale * dw[t * k + j];
  }
  float* dl = dlogits + t * e;
  if (sigmoid) {
    for (int64_t i = 0; i < e; ++i) dl[i] = ds[i] * s[i] * (1.f - s[i]);
  } else {
    float dot = 0;
    for (int64_t i = 0; i < e; ++i) dot += ds[i] * s[i];
    for (int64_t i = 0; i < e; ++i) dl[i] = s[i] * (ds[i] - dot);
  }
}

// One block per sequence: f (selection counts) and P (mean normalised scores) in shared memory.
__global__ void SeqAuxKernel(const float* scores, const int32_t* idx, int64_t seq_len, int64_t e, int64_t k, float coeff,
                             float* dscores, float* losses) {
  __shared__ float f[kMaxExperts], p[kMaxExperts];
  const int64_t q = blockIdx.x, t0 = q * seq_len;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) { f[i] = 0; p[i] = 0; }
  __syncthreads();
  for (int64_t t = t0 + threadIdx.x; t < t0 + seq_len; t += blockDim.x) {
    const float* st = scores + t * e;
    float sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += st[i];
    for (int64_t i = 0; i < e; ++i) atomicAdd(&p[i], st[i] / sum);
    for (int64_t j = 0; j < k; ++j) atomicAdd(&f[idx[t * k + j]], 1.f);
  }
  __syncthreads();
  const float fscale = static_cast<float>(e) / static_cast<float>(k * seq_len);
  float loss = 0;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) loss += f[i] * fscale * p[i] / static_cast<float>(seq_len);
  loss = BlockSum(loss);
  if (threadIdx.x == 0) losses[q] = coeff * loss;
  if (dscores == nullptr) return;
  const float c = coeff / static_cast<float>(seq_len);
  for (int64_t t = t0 + threadIdx.x; t < t0 + seq_len; t += blockDim.x) {
    const float* st = scores + t * e;
    float sum = 0, dot = 0;
    for (int64_t i = 0; i < e; ++i) sum += st[i];
    for (int64_t i = 0; i < e; ++i) dot += c * f[i] * fscale * st[i] / sum;
    for (int64_t i = 0; i < e; ++i) dscores[t * e + i] += (c * f[i] * fscale - dot) / sum;
  }
}

}  // namespace

template <typename T>
void EmbeddingForward(const T* table, const int32_t* ids, T* out, int64_t tokens, int64_t d, cudaStream_t s) {
  if (tokens * d > 0) EmbeddingForwardKernel<T><<<Blocks(tokens * d), kThreads, 0, s>>>(table, ids, out, tokens, d);
}
template <typename T>
void EmbeddingBackward(const T* dout, const int32_t* ids, float* dtable, int64_t tokens, int64_t d, cudaStream_t s) {
  if (tokens * d > 0) EmbeddingBackwardKernel<T><<<Blocks(tokens * d), kThreads, 0, s>>>(dout, ids, dtable, tokens, d);
}
MOE_CUDA_INSTANTIATE(EmbeddingForward)
MOE_CUDA_INSTANTIATE(EmbeddingBackward)
bool RouterForward(const float* logits, const float* bias, int64_t tokens, int64_t experts, int64_t top_k, int64_t groups,
                   int64_t topk_groups, bool sigmoid, float route_scale, bool use_bias, float* scores, int32_t* topk_idx,
                   float* topk_w, cudaStream_t s) {
  if (experts > kMaxExperts || groups > 64) return false;
  if (tokens == 0) return true;
  RouteKernel<<<Blocks(tokens, 128), 128, 0, s>>>(logits, bias, tokens, experts, top_k, groups, topk_groups, sigmoid, route_scale,
                                                 use_bias, scores, topk_idx, topk_w);
  return true;
}
bool RouterBackward(const float* scores, const int32_t* topk_idx, const float* dtopk_w, const float* dscores_extra,
                    int64_t tokens, int64_t experts, int64_t top_k, bool sigmoid, float route_scale, float* dlogits,
                    cudaStream_t s) {
  if (experts > kMaxExperts) return false;
  if (tokens == 0) return true;
  RouteBackwardKernel<<<Blocks(tokens, 128), 128, 0, s>>>(scores, topk_idx, dtopk_w, dscores_extra, tokens, experts, top_k,
                                                         sigmoid, route_scale, dlogits);
  return true;
}
double SeqAuxLoss(const float* scores, const int32_t* topk_idx, int64_t num_seqs, int64_t seq_len, int64_t experts,
                  int64_t top_k, float coeff, float* dscores, cudaStream_t s) {
  if (experts > kMaxExperts) return 0;
  return SumPartials(num_seqs, s, [&](float* losses) {
    SeqAuxKernel<<<static_cast<unsigned>(num_seqs), kThreads, 0, s>>>(scores, topk_idx, seq_len, experts, top_k, coeff, dscores, losses);
  });
}

}  // namespace moe::kernels::cuda
