// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, over the last dimension.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   x [R, D], w [D], y [R, D], rstd [R] (saved for the backward: 1/sqrt(mean(x^2)+eps))
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y,
                    const Tensor& rstd);
//   dx [R, D] is written; dw [D] is accumulated (summed over rows in a fixed order).
void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw);

}  // namespace moe::kernels
