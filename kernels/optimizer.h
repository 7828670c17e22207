// AdamW with decoupled weight decay, fused over one parameter tensor.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/tensor.h"

#ifdef __CUDACC__
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

namespace moe::kernels {

// Global-norm clipping's gradient scale from the squared norms of the dense and the expert gradients:
// norm = sqrt(sum) (rounded to fp32 when norm_fp32: deterministic training), then grad_clip / (norm +
// 1e-6) when grad_clip > 0 and norm > grad_clip, else 1; NaN when the norm is not finite (the update is
// skipped). The AdamW kernels of both devices compute it (Optimizer::StepWithDeviceNorm).
MOE_HOST_DEVICE inline double ClipScale(double dense_sq, double expert_sq, double grad_clip, bool norm_fp32) {
  double norm = sqrt(dense_sq + expert_sq);
  if (norm_fp32) norm = static_cast<double>(static_cast<float>(norm));
  if (!(norm - norm == 0)) return norm - norm;  // inf - inf and NaN - NaN are NaN
  return grad_clip > 0 && norm > grad_clip ? grad_clip / (norm + 1e-6) : 1.0;
}

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
  double grad_scale = 1.0;    // multiplies the gradient first (global-norm clipping)
  // Clipping without a host read of the norm: when set, three f64 on the parameters' device: the
  // squared global norms of the dense and the expert gradients, and a skip word; the kernel takes its
  // gradient scale from ClipScale(norm_sq[0], norm_sq[1], grad_clip, norm_fp32) and grad_scale is
  // ignored. A non-finite norm or a non-zero skip word (a batch with out-of-range indices on some rank)
  // leaves the parameters and moments unchanged.
  const double* norm_sq = nullptr;
  double grad_clip = 0;
  bool norm_fp32 = false;
};

//   param, grad: same shape, fp32 (f64 on the CPU for gradient checks). m and v (updated) are fp32, or
//   bf16 (DeepSeek-V3's BF16 moments: the update reads and computes in fp32 and rounds what it stores).
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg);

}  // namespace moe::kernels
