// Cross-entropy fused with softmax, one block per row: the kernels of
// kernels/cuda/cross_entropy.cu, which launches them. nvcc compiles them there; a host compiler
// compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path
// (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (cross_entropy.cu, or the emulated test).
namespace {

// One block per row: max, sum of exponentials, the loss, and (optionally) the gradient: in place
// (G = T, dlogits == logits) or in its own storage type (fp32 logits, bf16 gradient: the cast the
// head's backward GEMMs need, fused).
template <typename T, typename G = T>
__global__ void CrossEntropyKernel(const T* logits, const int32_t* targets, int64_t vocab,
                                   float scale, G* dlogits, float* losses, unsigned* bad) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, Ld(x[j]));
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(Ld(x[j]) - mx);
  sum = BlockSum(sum);
  const int32_t target = targets[r];
  const bool ok =
      InRange(target, vocab, bad, kBadTarget);  // a bad target: no read, and a failed step
  const int64_t t = ok ? target : -1;
  const float target_logit = ok ? Ld(x[t]) : 0.f;  // read before the gradient may overwrite it
  __syncthreads();
  if (threadIdx.x == 0) losses[r] = mx + logf(sum) - target_logit;
  if (dlogits != nullptr) {
    const float inv = 1.f / sum;
    G* d = dlogits + r * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      d[j] = Cvt<G>((expf(Ld(x[j]) - mx) * inv - (j == t ? 1.f : 0.f)) * scale);
    }
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
