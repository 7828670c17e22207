// DeepSeek-V3 routing (one warp per token), its backward (one thread per token), the sequence-wise
// balance loss: the kernels of kernels/cuda/router.cu, which launches them. nvcc compiles them
// there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU
// against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (router.cu, or the emulated test).
namespace {

constexpr int kMaxExperts = 512;
constexpr int kMaxGroups = 64;

// Routing, one warp per token (a 128-thread block routes kRouteWarps tokens): lane l holds experts
// l, l + 32, ... (kRouteSlots at most: E <= 512) in registers, and the choices are warp-wide
// arg-maxima by shuffles, where one thread per token kept 512-float arrays in local memory and
// scanned them k times over.
constexpr int kRouteSlots = kMaxExperts / 32;
constexpr int kRouteWarps = 4;

// NaN ranks as -inf, so that (key, index) is a total order and every lane of a reduction agrees.
__device__ inline float RankKey(float v) { return v != v ? -INFINITY : v; }

// The warp's best candidate: the largest key, the lower index on ties (as the CPU's scan, which
// keeps the first of equals); index -1: no candidate. payload travels with the winner.
__device__ inline void WarpBest(float* key, int* index, float* payload) {
  for (int o = 16; o > 0; o >>= 1) {
    const float k2 = __shfl_xor_sync(0xffffffffu, *key, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, *index, o);
    const float p2 = __shfl_xor_sync(0xffffffffu, *payload, o);
    if (i2 >= 0 && (*index < 0 || k2 > *key || (k2 == *key && i2 < *index))) {
      *key = k2;
      *index = i2;
      *payload = p2;
    }
  }
}

// The two largest values of the warp's (a >= c pairs), with repeats: a group's score needs its best
// two selection scores, exactly (no arithmetic: the CPU's pair, whatever the order).
__device__ inline void WarpTop2(float* a, float* c) {
  for (int o = 16; o > 0; o >>= 1) {
    const float a2 = __shfl_xor_sync(0xffffffffu, *a, o);
    const float c2 = __shfl_xor_sync(0xffffffffu, *c, o);
    const float lo = *a >= a2 ? a2 : *a;
    *a = *a >= a2 ? *a : a2;
    const float rest = *c >= c2 ? *c : c2;
    *c = lo >= rest ? lo : rest;
  }
}

// s = sigmoid(x), or softmax over the e experts (the warp's max and sum), into the lane's slots;
// sel = s + bias. Writes the scores.
__device__ inline void WarpScores(const float* x, const float* bias, int64_t e, bool sigmoid,
                                  bool use_bias, int lane, float* s, float* sel, float* out) {
  float mx = -INFINITY, sum = 0;
  if (!sigmoid) {
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q)
      if (lane + 32 * q < e) mx = fmaxf(mx, x[lane + 32 * q]);
    mx = WarpMax(mx);
  }
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i >= e) continue;
    s[q] = sigmoid ? 1.f / (1.f + expf(-x[i])) : expf(x[i] - mx);
    sum += s[q];
  }
  if (!sigmoid) sum = WarpSum(sum);
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i >= e) continue;
    if (!sigmoid) s[q] /= sum;
    out[i] = s[q];
    sel[q] = s[q] + (use_bias ? bias[i] : 0.f);
  }
}

// Group-limited routing: keeps the `topk_groups` best of `groups` groups (a group scores by the sum
// of its two best selection scores when the bias is in use, else its best; ties to the lower
// group) and masks the rest's selection scores to -inf. Lane l keeps the scores of groups l and
// l + 32.
__device__ inline void WarpKeepBestGroups(float* sel, int64_t e, int64_t groups,
                                          int64_t topk_groups, bool use_bias, int lane) {
  const int64_t per = e / groups;
  float mine[2] = {-INFINITY, -INFINITY};
  for (int64_t g = 0; g < groups; ++g) {
    float a = -INFINITY, c = -INFINITY;
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q) {
      const int64_t i = lane + 32 * q;
      if (i >= e || i / per != g) continue;
      if (sel[q] > a) {
        c = a;
        a = sel[q];
      } else if (sel[q] > c) {
        c = sel[q];
      }
    }
    WarpTop2(&a, &c);
    if (g % 32 == lane) mine[g / 32] = (use_bias && per >= 2) ? a + c : a;
  }
  uint64_t kept = 0;
  for (int64_t r = 0; r < topk_groups; ++r) {
    float key = -INFINITY, unused = 0;
    int best = -1;
    for (int q = 0; q < 2; ++q) {
      const int g = lane + 32 * q;
      if (g >= groups || ((kept >> g) & 1u) != 0) continue;
      if (best < 0 || RankKey(mine[q]) > key) {
        key = RankKey(mine[q]);
        best = g;
      }
    }
    WarpBest(&key, &best, &unused);
    kept |= uint64_t{1} << best;
  }
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i < e && ((kept >> (i / per)) & 1u) == 0) sel[q] = -INFINITY;
  }
}

// One warp per token (E <= kMaxExperts, groups <= kMaxGroups). The top k are k successive
// warp-wide arg-maxima of the selection scores among the experts not taken yet; ties go to the
// lower index, as on the CPU. The weights are the picks' scores, summed in pick order.
__global__ void RouteWarpKernel(const float* logits, const float* bias, int64_t tokens, int64_t e,
                                int64_t k, int64_t groups, int64_t topk_groups, bool sigmoid,
                                float route_scale, bool use_bias, float* scores, int32_t* idx,
                                float* w) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + threadIdx.x / 32;
  if (t >= tokens) return;  // the whole warp: t is the warp's
  float s[kRouteSlots], sel[kRouteSlots];
  WarpScores(logits + t * e, bias, e, sigmoid, use_bias, lane, s, sel, scores + t * e);
  if (groups > 1) WarpKeepBestGroups(sel, e, groups, topk_groups, use_bias, lane);
  uint32_t taken = 0;  // this lane's slots already picked
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    float key = -INFINITY, pick = 0;
    int best = -1;
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q) {
      const int64_t i = lane + 32 * q;
      if (i >= e || ((taken >> q) & 1u) != 0) continue;
      if (best < 0 || RankKey(sel[q]) > key) {
        key = RankKey(sel[q]);
        best = static_cast<int>(i);
        pick = s[q];
      }
    }
    WarpBest(&key, &best, &pick);
    if (best % 32 == lane) taken |= 1u << (best / 32);
    sum += pick;
    if (lane == 0) {
      idx[t * k + j] = best;
      w[t * k + j] = pick;
    }
  }
  if (lane != 0) return;
  for (int64_t j = 0; j < k; ++j)  // lane 0's own stores, read back
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
