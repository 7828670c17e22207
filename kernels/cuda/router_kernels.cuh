// DeepSeek-V3 routing (one warp per token), its backward (one warp per token), the sequence-wise
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
__device__ __forceinline__ void WarpBest(float* key, int* index, float* payload) {
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

// The warp's next pick: the best expert by key_of (a lane's slots) not taken yet, its payload_of
// value with it; marks it taken in its lane's mask. Every lane gets the same index.
__device__ __forceinline__ int WarpPick(const float* key_of, const float* payload_of, int64_t e,
                                        int lane, uint32_t* taken, float* payload) {
  float key = -INFINITY;
  int best = -1;
  *payload = 0;
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i >= e || ((*taken >> q) & 1u) != 0) continue;
    if (best < 0 || RankKey(key_of[q]) > key) {
      key = RankKey(key_of[q]);
      best = static_cast<int>(i);
      *payload = payload_of[q];
    }
  }
  WarpBest(&key, &best, payload);
  if (best >= 0 && best % 32 == lane) *taken |= 1u << (best / 32);
  return best;
}

// The two largest values of the warp's (a >= c pairs), with repeats: a group's score needs its best
// two selection scores, exactly (no arithmetic: the CPU's pair, whatever the order).
__device__ __forceinline__ void WarpTop2(float* a, float* c) {
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
__device__ __forceinline__ void WarpScores(const float* x, const float* bias, int64_t e,
                                           bool sigmoid, bool use_bias, int lane, float* s,
                                           float* sel, float* out) {
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
__device__ __forceinline__ void WarpKeepBestGroups(float* sel, int64_t e, int64_t groups,
                                                   int64_t topk_groups, bool use_bias, int lane) {
  const int per = static_cast<int>(e / groups);  // e <= 512: 32-bit group ids
  float mine0 = -INFINITY, mine1 = -INFINITY;    // groups lane and lane + 32 (registers)
  for (int g = 0; g < groups; ++g) {
    float a = -INFINITY, c = -INFINITY;
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q) {
      const int i = lane + 32 * q;
      if (i >= e || i / per != g) continue;
      if (sel[q] > a) {
        c = a;
        a = sel[q];
      } else if (sel[q] > c) {
        c = sel[q];
      }
    }
    WarpTop2(&a, &c);
    const float score = (use_bias && per >= 2) ? a + c : a;
    if (g == lane) mine0 = score;
    if (g == lane + 32) mine1 = score;
  }
  uint64_t kept = 0;
  for (int64_t r = 0; r < topk_groups; ++r) {
    float key = -INFINITY, unused = 0;
    int best = -1;
    for (int q = 0; q < 2; ++q) {
      const int g = lane + 32 * q;
      const float mine = q == 0 ? mine0 : mine1;
      if (g >= groups || ((kept >> g) & 1u) != 0) continue;
      if (best < 0 || RankKey(mine) > key) {
        key = RankKey(mine);
        best = g;
      }
    }
    WarpBest(&key, &best, &unused);
    kept |= uint64_t{1} << best;
  }
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int i = lane + 32 * q;
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
    float pick = 0;
    const int best = WarpPick(sel, s, e, lane, &taken, &pick);
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

// The routing's backward, one warp per token (a 128-thread block takes kRouteWarps tokens): lane l
// holds d score for experts l, l + 32, ... in registers; the k picks' terms go to their owners'
// slots. The CPU's formulas, in its order but for softmax's dot product (the warp's tree sum).
// Where one thread per token kept a 512-float array in local memory and read its row uncoalesced.
__global__ void RouteBackwardWarpKernel(const float* scores, const int32_t* idx, const float* dw,
                                        const float* dextra, int64_t tokens, int64_t e, int64_t k,
                                        bool sigmoid, float route_scale, float* dlogits) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + threadIdx.x / 32;
  if (t >= tokens) return;  // the whole warp: t is the warp's
  const float* s = scores + t * e;
  const int32_t* pick = idx + t * k;
  const float* dwt = dw + t * k;
  float sum = 0, dot = 0;  // every lane the same, in pick order
  if (sigmoid) {
    for (int64_t j = 0; j < k; ++j) {
      sum += s[pick[j]];
      dot += dwt[j] * s[pick[j]];
    }
  }
  float ds[kRouteSlots];
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    ds[q] = i < e && dextra != nullptr ? dextra[t * e + i] : 0.f;
  }
  for (int64_t j = 0; j < k; ++j) {
    const int i = pick[j];
    if (i % 32 != lane) continue;
    const float term =
        sigmoid ? route_scale * (dwt[j] / sum - dot / (sum * sum)) : route_scale * dwt[j];
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q)  // a register, not a local-memory index
      if (q == i / 32) ds[q] += term;
  }
  float sdot = 0;
  if (!sigmoid) {
#pragma unroll
    for (int q = 0; q < kRouteSlots; ++q)
      if (lane + 32 * q < e) sdot += ds[q] * s[lane + 32 * q];
    sdot = WarpSum(sdot);
  }
  float* dl = dlogits + t * e;
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i >= e) continue;
    dl[i] = sigmoid ? ds[q] * s[i] * (1.f - s[i]) : s[i] * (ds[q] - sdot);
  }
}

// The sequence-wise balance loss (kernels/router.h) in four kernels over (token) and (sequence,
// token chunk) grids, where one block per sequence left all but a few SMs idle (a DeepSeek-V3
// micro-batch is one sequence of 4,096 tokens). Deterministic: the counts f are integer atomics
// (exact in any order), every float sum has a fixed order.
//   1. SeqAuxCountKernel, a warp per token: its score sum (to `sums`), and its top-k of the
//      unbiased scores, warp-wide arg-maxima with ties to the lower index, counted into
//      counts[sequence][expert].
//   2. SeqAuxProbKernel, a block per (sequence, chunk of kAuxChunk tokens), a thread per expert:
//      the chunk's sum_t s_{i,t} / sum_t, in token order.
//   3. SeqAuxLossKernel, a block per sequence: P_i = the chunks' sums in chunk order / seq_len,
//      f_i = counts_i E / (k seq_len) (kept for 4), the sequence's loss coeff sum_i f_i P_i.
//   4. SeqAuxGradKernel, a warp per token, when dscores is given: d loss / d s_{i,t} =
//      c (f_i - sum_j f_j s_{j,t} / sum_t) / sum_t, c = coeff / seq_len.
constexpr int64_t kAuxChunk = 32;

__global__ void SeqAuxCountKernel(const float* scores, int64_t tokens, int64_t seq_len, int64_t e,
                                  int64_t k, float* sums, int* counts) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + threadIdx.x / 32;
  if (t >= tokens) return;  // the whole warp
  const float* st = scores + t * e;
  float v[kRouteSlots];
  float sum = 0;
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    if (lane + 32 * q >= e) continue;
    v[q] = st[lane + 32 * q];
    sum += v[q];
  }
  sum = WarpSum(sum);
  if (lane == 0) sums[t] = sum;
  int* c = counts + (t / seq_len) * e;
  uint32_t taken = 0;
  for (int64_t j = 0; j < k; ++j) {
    float unused = 0;
    const int best = WarpPick(v, v, e, lane, &taken, &unused);
    if (lane == 0) atomicAdd(&c[best], 1);
  }
}

__global__ void SeqAuxProbKernel(const float* scores, const float* sums, int64_t seq_len, int64_t e,
                                 int64_t chunks, float* partial) {
  const int64_t seq = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int64_t t0 = seq * seq_len + chunk * kAuxChunk;
  const int64_t t1 = min(seq * seq_len + seq_len, t0 + kAuxChunk);
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) {
    float p = 0;
    for (int64_t t = t0; t < t1; ++t) p += scores[t * e + i] / sums[t];
    partial[int64_t{blockIdx.x} * e + i] = p;  // (seq * chunks + chunk) * e + i
  }
}

__global__ void SeqAuxLossKernel(const float* partial, const int* counts, int64_t chunks,
                                 int64_t seq_len, int64_t e, int64_t k, float coeff, float* f,
                                 float* losses) {
  const int64_t seq = blockIdx.x;
  const float fscale = static_cast<float>(e) / static_cast<float>(k * seq_len);
  float loss = 0;
  for (int64_t i = threadIdx.x; i < e; i += blockDim.x) {
    float p = 0;
    for (int64_t c = 0; c < chunks; ++c) p += partial[(seq * chunks + c) * e + i];
    const float fi = static_cast<float>(counts[seq * e + i]) * fscale;
    f[seq * e + i] = fi;
    loss += fi * p / static_cast<float>(seq_len);
  }
  loss = BlockSum(loss);
  if (threadIdx.x == 0) losses[seq] = coeff * loss;
}

__global__ void SeqAuxGradKernel(const float* scores, const float* sums, const float* f,
                                 int64_t tokens, int64_t seq_len, int64_t e, float c,
                                 float* dscores) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + threadIdx.x / 32;
  if (t >= tokens) return;  // the whole warp
  const float* st = scores + t * e;
  const float* fs = f + (t / seq_len) * e;
  const float sum = sums[t];
  float dot = 0;
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q)
    if (lane + 32 * q < e) dot += fs[lane + 32 * q] * st[lane + 32 * q];
  dot = WarpSum(dot) / sum;
#pragma unroll
  for (int q = 0; q < kRouteSlots; ++q) {
    const int64_t i = lane + 32 * q;
    if (i < e) dscores[t * e + i] += c * (fs[i] - dot) / sum;
  }
}

// The four launches through `launch` (a CUDA launch on the kernels' stream, or the emulator's):
// counts must be zero, sums [tokens], partial [seqs x chunks x e], f [seqs x e], losses [seqs].
struct SeqAuxBuffers {
  float *sums, *partial, *f, *losses, *dscores;
  int* counts;
};
inline int64_t SeqAuxChunks(int64_t seq_len) { return (seq_len + kAuxChunk - 1) / kAuxChunk; }
template <typename Launch>
void SeqAuxSteps(const float* scores, int64_t seqs, int64_t seq_len, int64_t e, int64_t k,
                 float coeff, const SeqAuxBuffers& b, Launch&& launch) {
  const int64_t tokens = seqs * seq_len, chunks = SeqAuxChunks(seq_len);
  const dim3 warps(static_cast<unsigned>((tokens + kRouteWarps - 1) / kRouteWarps));
  launch(SeqAuxCountKernel, warps, dim3(32 * kRouteWarps), scores, tokens, seq_len, e, k, b.sums,
         b.counts);
  launch(SeqAuxProbKernel, dim3(static_cast<unsigned>(chunks * seqs)), dim3(kThreads), scores,
         static_cast<const float*>(b.sums), seq_len, e, chunks, b.partial);
  launch(SeqAuxLossKernel, dim3(static_cast<unsigned>(seqs)), dim3(kThreads),
         static_cast<const float*>(b.partial), static_cast<const int*>(b.counts), chunks, seq_len,
         e, k, coeff, b.f, b.losses);
  if (b.dscores == nullptr) return;
  launch(SeqAuxGradKernel, warps, dim3(32 * kRouteWarps), scores, static_cast<const float*>(b.sums),
         static_cast<const float*>(b.f), tokens, seq_len, e, coeff / static_cast<float>(seq_len),
         b.dscores);
}

}  // namespace
}  // namespace moe::kernels::cuda
