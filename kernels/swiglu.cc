// Device dispatch of SwiGLU (kernels/swiglu.h): shapes, then the CPU or CUDA path.
#include "kernels/swiglu.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(SwigluForward)
MOE_KERNEL_BACKENDS(SwigluBackward)

void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  const int64_t rows = gate_up.dim(0), f = out.dim(1);
  MOE_CHECK(gate_up.dim(1) == 2 * f && out.dim(0) == rows)
      << "SwigluForward: gate_up " << gate_up.ShapeString() << ", out " << out.ShapeString();
  return MOE_DISPATCH(out, SwigluForward(gate_up, out));
}

void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  const int64_t rows = gate_up.dim(0), f = dout.dim(1);
  MOE_CHECK(gate_up.dim(1) == 2 * f && dout.dim(0) == rows && dgate_up.shape() == gate_up.shape())
      << "SwigluBackward shapes";
  return MOE_DISPATCH(dgate_up, SwigluBackward(gate_up, dout, dgate_up));
}

}  // namespace moe::kernels
