// AdamW on fp32 master weights, fused elementwise: decoupled weight decay, bias-corrected moments
// (the step is 1-based), the gradient scaled first (global-norm clipping).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moe::kernels::cuda {
namespace {

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                            float wd, float inv_bc1, float inv_sqrt_bc2, float gs) {
  MOE_CUDA_LOOP(i, n) {
    const float gi = g[i] * gs;
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    const float update = (m[i] * inv_bc1) / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    p[i] -= lr * (update + wd * p[i]);
  }
}

}  // namespace

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg) {
  CheckOnCuda({&param, &grad, &m, &v}, "AdamW");
  for (const Tensor* t : {&param, &grad, &m, &v}) CheckF32(*t, "AdamW", "master weights, gradients and moments");
  const float beta1 = static_cast<float>(cfg.beta1), beta2 = static_cast<float>(cfg.beta2);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(cfg.step));
  const int64_t n = param.numel();
  if (n > 0) {
    AdamWKernel<<<Blocks(n), kThreads, 0, Stream()>>>(
        Ptr<float>(param), Ptr<float>(grad), Ptr<float>(m), Ptr<float>(v), n, static_cast<float>(cfg.lr), beta1, beta2,
        static_cast<float>(cfg.eps), static_cast<float>(cfg.weight_decay), static_cast<float>(1.0 / bc1),
        static_cast<float>(1.0 / std::sqrt(bc2)), static_cast<float>(cfg.grad_scale));
  }
  CheckLaunch("AdamW");
}

}  // namespace moe::kernels::cuda
