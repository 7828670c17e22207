// AdamW on fp32 master weights, fused elementwise: decoupled weight decay, bias-corrected moments
// (the step is 1-based), the gradient scaled first (global-norm clipping). The moments are fp32, or
// bf16 (DeepSeek-V3's): read into fp32, updated and used in fp32, rounded to nearest even when
// stored.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optimizer_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg) {
  CheckOnCuda({&param, &grad, &m, &v}, "AdamW");
  for (const Tensor* t : {&param, &grad}) CheckF32(*t, "AdamW", "master weights and gradients");
  const DType moments = StorageType({&m, &v}, "AdamW (moments)");
  const float beta1 = static_cast<float>(cfg.beta1), beta2 = static_cast<float>(cfg.beta2);
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(cfg.step));
  const int64_t n = param.numel();
  MOE_CUDA_TYPED(moments, M, {
    if (n > 0) {
      AdamWKernel<M><<<Blocks(n), kThreads, 0, Stream()>>>(
          Ptr<float>(param), Ptr<float>(grad), Ptr<M>(m), Ptr<M>(v), n, static_cast<float>(cfg.lr),
          beta1, beta2, static_cast<float>(cfg.eps), static_cast<float>(cfg.weight_decay),
          static_cast<float>(1.0 / bc1), static_cast<float>(1.0 / std::sqrt(bc2)),
          static_cast<float>(cfg.grad_scale), cfg.norm_sq, cfg.grad_clip, cfg.norm_fp32);
    }
  });
  CheckLaunch("AdamW");
}

}  // namespace moe::kernels::cuda
