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

// The residual add and the RMSNorm after it, in one pass on CUDA (two on the CPU): sum = x + r
// (stored, rounded to its dtype), then RmsNormForward(sum, w, eps, y, rstd). The same values as
// Add followed by RmsNormForward, bit for bit. sum may be x or r (in place).
//   x, r, sum, y [R, D], w [D], rstd [R]
void AddRmsNormForward(const Tensor& x, const Tensor& r, const Tensor& w, double eps,
                       const Tensor& sum, const Tensor& y, const Tensor& rstd);
// RmsNormBackward, then dx += dres (the residual's gradient), in the same pass on CUDA: the values
// of RmsNormBackward followed by Add. dres [R, D] may not be dx.
void RmsNormBackwardAdd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dres, const Tensor& dx, const Tensor& dw);

}  // namespace moe::kernels
