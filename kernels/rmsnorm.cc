// Device dispatch of RMSNorm (kernels/rmsnorm.h): shapes, then the CPU or CUDA path.
#include "kernels/rmsnorm.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(RmsNormForward)
MOE_KERNEL_BACKENDS(RmsNormBackward)

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y,
                    const Tensor& rstd) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CHECK(w.numel() == d && y.shape() == x.shape() && rstd.numel() == rows)
      << "RmsNormForward: x " << x.ShapeString() << ", w " << w.ShapeString() << ", y "
      << y.ShapeString();
  return MOE_DISPATCH(y, RmsNormForward(x, w, eps, y, rstd));
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape() && dw.numel() == d &&
            rstd.numel() == rows)
      << "RmsNormBackward shapes";
  return MOE_DISPATCH(dx, RmsNormBackward(dy, x, w, rstd, dx, dw));
}

}  // namespace moe::kernels
