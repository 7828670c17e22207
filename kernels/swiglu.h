// SwiGLU activation on a fused gate|up projection: out = silu(gate) * up.
#pragma once

#include "kernels/tensor.h"

namespace moe::kernels {

//   gate_up [R, 2F] (gate = columns [0, F), up = [F, 2F)), out [R, F]
void SwigluForward(const Tensor& gate_up, const Tensor& out);
//   dgate_up [R, 2F] is written.
void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up);

}  // namespace moe::kernels
