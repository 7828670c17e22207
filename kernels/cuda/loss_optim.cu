// Cross-entropy fused with softmax, and AdamW.
#include <cmath>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

// One block per row: max, sum of exponentials, the loss, and (optionally, in place) the gradient.
template <typename T>
__global__ void CrossEntropyKernel(const T* logits, const int32_t* targets, int64_t vocab, float scale, T* dlogits,
                                   float* losses) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, Ld(x[j]));
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(Ld(x[j]) - mx);
  sum = BlockSum(sum);
  const int32_t t = targets[r];
  const float target_logit = Ld(x[t]);  // read before the gradient may overwrite it
  __syncthreads();
  if (threadIdx.x == 0) losses[r] = mx + logf(sum) - target_logit;
  if (dlogits != nullptr) {
    const float inv = 1.f / sum;
    T* d = dlogits + r * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      d[j] = Cvt<T>((expf(Ld(x[j]) - mx) * inv - (j == t ? 1.f : 0.f)) * scale);
    }
  }
}

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                            float wd, float inv_bc1, float inv_sqrt_bc2, float gs) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float gi = g[i] * gs;
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    const float update = (m[i] * inv_bc1) / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    p[i] -= lr * (update + wd * p[i]);
  }
}

}  // namespace

template <typename T>
double CrossEntropy(const T* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale, T* dlogits,
                    cudaStream_t s) {
  return SumPartials(rows, s, [&](float* losses) {
    CrossEntropyKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(logits, targets, vocab, grad_scale, dlogits, losses);
  });
}
MOE_CUDA_INSTANTIATE(CrossEntropy)

void AdamW(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, int64_t step, float grad_scale, cudaStream_t s) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  if (n == 0) return;
  AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, static_cast<float>(1.0 / bc1),
                                             static_cast<float>(1.0 / std::sqrt(bc2)), grad_scale);
}

}  // namespace moe::kernels::cuda
