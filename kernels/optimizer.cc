// Device dispatch of AdamW (kernels/optimizer.h): shapes, then the CPU or CUDA path.
#include "kernels/optimizer.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(AdamW)

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg) {
  MOE_CHECK(grad.numel() == param.numel() && m.numel() == param.numel() &&
            v.numel() == param.numel())
      << "AdamW shapes";
  return MOE_DISPATCH(param, AdamW(param, grad, m, v, cfg));
}

}  // namespace moe::kernels
