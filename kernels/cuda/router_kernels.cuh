// DeepSeek-V3 routing (one thread per token), its backward, the sequence-wise balance loss: the
// kernels of kernels/cuda/router.cu, which launches them. nvcc compiles them there; a host compiler
// compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path
// (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (router.cu, or the emulated test).
namespace {

constexpr int kMaxExperts = 512;
constexpr int kMaxGroups = 64;

// s = sigmoid(x), or softmax over the e experts.
__device__ void RouterScores(const float* x, int64_t e, bool sigmoid, float* s) {
  if (sigmoid) {
    for (int64_t i = 0; i < e; ++i) s[i] = 1.f / (1.f + expf(-x[i]));
  } else {
    float mx = x[0], sum = 0;
    for (int64_t i = 1; i < e; ++i) mx = fmaxf(mx, x[i]);
    for (int64_t i = 0; i < e; ++i) sum += (s[i] = expf(x[i] - mx));
    for (int64_t i = 0; i < e; ++i) s[i] /= sum;
  }
}

// Group-limited routing: keeps the `topk_groups` best of `groups` groups (a group scores by the sum
// of its two best selection scores when the bias is in use, else its best) and masks the rest to
// -inf.
__device__ void KeepBestGroups(float* sel, int64_t e, int64_t groups, int64_t topk_groups,
                               bool use_bias) {
  const int64_t per = e / groups;
  float gscore[kMaxGroups];
  bool kept[kMaxGroups];
  for (int64_t g = 0; g < groups; ++g) {
    float a = -INFINITY, c = -INFINITY;
    for (int64_t i = 0; i < per; ++i) {
      const float v = sel[g * per + i];
      if (v > a) {
        c = a;
        a = v;
      } else if (v > c) {
        c = v;
      }
    }
    gscore[g] = (use_bias && per >= 2) ? a + c : a;
    kept[g] = false;
  }
  for (int64_t r = 0; r < topk_groups; ++r) {
    int64_t best = -1;
    for (int64_t g = 0; g < groups; ++g)
      if (!kept[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
    kept[best] = true;
  }
  for (int64_t i = 0; i < e; ++i)
    if (!kept[i / per]) sel[i] = -INFINITY;
}

// One thread per token (E <= kMaxExperts). Ties go to the lower index, as on the CPU.
__global__ void RouteKernel(const float* logits, const float* bias, int64_t tokens, int64_t e,
                            int64_t k, int64_t groups, int64_t topk_groups, bool sigmoid,
                            float route_scale, bool use_bias, float* scores, int32_t* idx,
                            float* w) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= tokens) return;
  float* s = scores + t * e;
  RouterScores(logits + t * e, e, sigmoid, s);
  float sel[kMaxExperts];
  for (int64_t i = 0; i < e; ++i) sel[i] = s[i] + (use_bias ? bias[i] : 0.f);
  if (groups > 1) KeepBestGroups(sel, e, groups, topk_groups, use_bias);
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
  for (int64_t j = 0; j < k; ++j)
    w[t * k + j] = (sigmoid ? w[t * k + j] / sum : w[t * k + j]) * route_scale;
}

__global__ void RouteBackwardKernel(const float* scores, const int32_t* idx, const float* dw,
                                    const float* dextra, int64_t tokens, int64_t e, int64_t k,
                                    bool sigmoid, float route_scale, float* dlogits) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= tokens) return;
  const float* s = scores + t * e;
  float ds[kMaxExperts];
  for (int64_t i = 0; i < e; ++i) ds[i] = dextra != nullptr ? dextra[t * e + i] : 0.f;
  if (sigmoid) {
    float sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += s[idx[t * k + j]];
      dot += dw[t * k + j] * s[idx[t * k + j]];
    }
    for (int64_t j = 0; j < k; ++j)
      ds[idx[t * k + j]] += route_scale * (dw[t * k + j] / sum - dot / (sum * sum));
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

// The balance loss of one sequence per block (kernels/router.h), deterministic: the counts f come
// from integer atomics (exact in any order), P_i from one thread per expert adding the tokens in
// order, the loss from a fixed block reduction (the host adds the sequences' partials in order).
//   1. per token (a thread each): its score sum (to `sums`), and its top-k of the unbiased scores,
//      picked as successive maxima, each the largest below the last in (score, lower index first)
//      order, so ties go to the lower index; counted into f.
//   2. per expert (a thread each): P_i = mean_t s_{i,t} / sum_t; the loss partial sum_i f_i P_i.
//   3. per token, when dscores is given: d loss / d s_{i,t} = c (f_i - sum_j f_j s_{j,t} / sum_t) /
//   sum_t.
__global__ void SeqAuxKernel(const float* scores, int64_t seq_len, int64_t e, int64_t k,
                             float coeff, float* sums, float* dscores, float* losses) {
  __shared__ int count[kMaxExperts];
  __shared__ float f[kMaxExperts];
  const int64_t t0 = blockIdx.x * seq_len, t1 = t0 + seq_len;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) count[i] = 0;
  __syncthreads();
  for (int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
    const float* st = scores + t * e;
    float sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += st[i];
    sums[t] = sum;
    float last = INFINITY;
    int64_t last_i = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t i = 0; i < e; ++i) {
        const float v = st[i];
        const bool below = v < last || (v == last && i > last_i);
        if (below && (best < 0 || v > st[best])) best = i;
      }
      if (best < 0) break;  // only NaN scores are left: nothing ranks below the last pick
      atomicAdd(&count[best], 1);
      last = st[best];
      last_i = best;
    }
  }
  __syncthreads();  // the counts, and `sums` (global writes are visible to the block after a
                    // barrier)
  const float fscale = static_cast<float>(e) / static_cast<float>(k * seq_len);
  float loss = 0;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) {
    float p = 0;
    for (int64_t t = t0; t < t1; ++t) p += scores[t * e + i] / sums[t];
    f[i] = static_cast<float>(count[i]) * fscale;
    loss += f[i] * p / static_cast<float>(seq_len);
  }
  loss = BlockSum(loss);  // its barriers also publish f
  if (threadIdx.x == 0) losses[blockIdx.x] = coeff * loss;
  if (dscores == nullptr) return;
  const float c = coeff / static_cast<float>(seq_len);
  for (int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
    const float* st = scores + t * e;
    const float sum = sums[t];
    float dot = 0;
    for (int64_t i = 0; i < e; ++i) dot += f[i] * st[i];
    dot /= sum;
    for (int64_t i = 0; i < e; ++i) dscores[t * e + i] += c * (f[i] - dot) / sum;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
