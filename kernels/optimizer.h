// AdamW with decoupled weight decay, fused over one parameter tensor.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace moe::kernels {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
  double grad_scale = 1.0;    // multiplies the gradient first (global-norm clipping)
};

//   param, grad: same shape, fp32 (f64 on the CPU for gradient checks). m and v (updated) are fp32, or
//   bf16 (DeepSeek-V3's BF16 moments: the update reads and computes in fp32 and rounds what it stores).
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg);

}  // namespace moe::kernels
