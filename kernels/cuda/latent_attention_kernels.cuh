// The latent decoding attention's kernel (kernels/latent_attention.h): one block per (query, head).
// The block holds the query and the scores of the visible rows in shared memory; each thread
// scores rows, the block reduces the maximum and the sum, then each thread sums one or more of the
// dv output columns over the rows. Decoding runs a few queries over up to thousands of rows, so
// this is bandwidth-bound on the cache and simple on purpose. kernels/cuda/latent_attention.cu
// launches it; a host compiler compiles it under tests/gpu/cuda_emulator.h, which runs it on the
// CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/mma.cuh"  // MOE_DYNAMIC_SMEM

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes it (latent_attention.cu, or the emulated test).
namespace {

constexpr int kDecodeThreads = 128;
constexpr int64_t kMaxSharedBytes = 48 * 1024;

// The block's reduction of one value per thread (max or sum), via warps, through `scratch` [32].
template <bool kMax>
__device__ float DecodeReduce(float v, float* scratch) {
  v = kMax ? WarpMax(v) : WarpSum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = static_cast<int>(threadIdx.x) < warps ? scratch[threadIdx.x] : (kMax ? -INFINITY : 0.f);
  if (warp == 0) {
    r = kMax ? WarpMax(r) : WarpSum(r);
    if (lane == 0) scratch[0] = r;
  }
  __syncthreads();
  r = scratch[0];
  __syncthreads();
  return r;
}

template <typename T>
__global__ void LatentDecodeKernel(const T* q, const T* cache, T* out, int64_t n, int64_t total,
                                   int64_t d, int64_t heads, int64_t dv, float scale) {
  MOE_DYNAMIC_SMEM(raw);
  float* smem = reinterpret_cast<float*>(raw);
  float* scratch = smem;          // [32]
  float* qs = smem + 32;          // [d]
  float* scores = smem + 32 + d;  // [visible]
  const int64_t i = blockIdx.x / heads, h = blockIdx.x % heads, visible = total - n + i + 1;
  const T* qi = q + i * heads * d + h * d;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) qs[k] = Ld(qi[k]);
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t t = threadIdx.x; t < visible; t += blockDim.x) {
    const T* row = cache + t * d;
    float s = 0.f;
    for (int64_t k = 0; k < d; ++k) s += qs[k] * Ld(row[k]);
    scores[t] = s * scale;
    mx = fmaxf(mx, scores[t]);
  }
  mx = DecodeReduce<true>(mx, scratch);
  float sum = 0.f;
  for (int64_t t = threadIdx.x; t < visible; t += blockDim.x) {
    scores[t] = expf(scores[t] - mx);
    sum += scores[t];
  }
  sum = DecodeReduce<false>(sum, scratch);
  T* oi = out + i * heads * dv + h * dv;
  for (int64_t k = threadIdx.x; k < dv; k += blockDim.x) {
    float acc = 0.f;
    for (int64_t t = 0; t < visible; ++t) acc += scores[t] * Ld(cache[t * d + k]);
    oi[k] = Cvt<T>(acc / sum);
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
