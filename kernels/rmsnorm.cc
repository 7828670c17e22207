// Device dispatch of RMSNorm (kernels/rmsnorm.h): shapes, then the CPU or CUDA path.
#include "kernels/rmsnorm.h"

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(RmsNormForward)
MOE_KERNEL_BACKENDS(RmsNormBackward)
// Fused on CUDA; the CPU runs the two passes (below).
MOE_CUDA_KERNEL(AddRmsNormForward)
MOE_CUDA_KERNEL(RmsNormBackwardAdd)

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

void AddRmsNormForward(const Tensor& x, const Tensor& r, const Tensor& w, double eps,
                       const Tensor& sum, const Tensor& y, const Tensor& rstd) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CHECK(r.shape() == x.shape() && sum.shape() == x.shape() && y.shape() == x.shape() &&
            w.numel() == d && rstd.numel() == rows)
      << "AddRmsNormForward: x " << x.ShapeString() << ", r " << r.ShapeString() << ", sum "
      << sum.ShapeString() << ", w " << w.ShapeString() << ", y " << y.ShapeString();
#ifdef MOE_WITH_CUDA
  if (y.device().is_cuda()) return cuda::AddRmsNormForward(x, r, w, eps, sum, y, rstd);
#endif
  Add(sum, x, r);  // the CPU: the two passes
  RmsNormForward(sum, w, eps, y, rstd);
}

void RmsNormBackwardAdd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                        const Tensor& dres, const Tensor& dx, const Tensor& dw) {
  MOE_CHECK(dres.shape() == x.shape() && dres.raw() != dx.raw())
      << "RmsNormBackwardAdd: dres " << dres.ShapeString() << " for x " << x.ShapeString()
      << (dres.raw() == dx.raw() ? " (dres is dx)" : "");
  const int64_t rows = x.dim(0), d = x.dim(1);
  MOE_CHECK(dy.shape() == x.shape() && dx.shape() == x.shape() && dw.numel() == d &&
            rstd.numel() == rows)
      << "RmsNormBackwardAdd shapes";
#ifdef MOE_WITH_CUDA
  if (dx.device().is_cuda()) return cuda::RmsNormBackwardAdd(dy, x, w, rstd, dres, dx, dw);
#endif
  RmsNormBackward(dy, x, w, rstd, dx, dw);  // the CPU: the two passes
  Add(dx, dx, dres);
}

}  // namespace moe::kernels
