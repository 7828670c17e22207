// AdamW with decoupled weight decay, fused over one parameter tensor.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels {

//   param, grad: same shape, fp32 (f64 on the CPU for gradient checks). m and v (updated) are fp32,
//   or bf16 (DeepSeek-V3's BF16 moments: the update reads and computes in fp32 and rounds what it
//   stores).
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg);

}  // namespace moe::kernels
