// Device dispatch of the elementwise family (kernels/elementwise.h): shapes, then the CPU or CUDA
// path.
#include "kernels/elementwise.h"

#include <algorithm>

#include "kernels/dispatch.h"
#include "kernels/kernel_state.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(Fill)
MOE_KERNEL_BACKENDS(Axpy)
MOE_KERNEL_BACKENDS(Add)
MOE_KERNEL_BACKENDS(Scale)
MOE_KERNEL_BACKENDS(SumSquares)
MOE_KERNEL_BACKENDS(GatherRows)
MOE_KERNEL_BACKENDS(ScatterAddRows)
MOE_KERNEL_BACKENDS(CopyColumns)
MOE_KERNEL_BACKENDS(SumColumns)
MOE_KERNEL_BACKENDS(Convert)
MOE_KERNEL_BACKENDS(FillUniform)
MOE_CUDA_KERNEL(FoldBadIndices)

void Fill(const Tensor& t, double value) { return MOE_DISPATCH(t, Fill(t, value)); }

void Axpy(const Tensor& y, double alpha, const Tensor& x) {
  MOE_CHECK(x.numel() == y.numel() && x.dtype() == y.dtype())
      << "Axpy: " << x.ShapeString() << " into " << y.ShapeString();
  return MOE_DISPATCH(y, Axpy(y, alpha, x));
}

void Add(const Tensor& out, const Tensor& a, const Tensor& b) {
  MOE_CHECK(a.numel() == out.numel() && b.numel() == out.numel())
      << "Add: " << a.ShapeString() << " + " << b.ShapeString();
  return MOE_DISPATCH(out, Add(out, a, b));
}

void Scale(const Tensor& t, double s) { return MOE_DISPATCH(t, Scale(t, s)); }

double SumSquares(const Tensor& t) {
  CountHostSync();  // the host waits for the value (on the CPU stand-in: where it would)
  return MOE_DISPATCH(t, SumSquares(t));
}

void FoldBadIndices(const Tensor& acc, int64_t slot) {
  MOE_CHECK(acc.dtype() == DType::kF64 && acc.ndim() == 1 && slot >= 0 && slot < acc.numel())
      << "FoldBadIndices: acc " << acc.ShapeString();
  if (acc.device().is_cpu()) {
    acc.data<double>()[slot] = 0;
    return;
  }
#ifdef MOE_WITH_CUDA
  cuda::FoldBadIndices(acc, slot);
#else
  CheckNotCuda(acc);
#endif
}

void SumSquaresInto(const Tensor& t, const Tensor& acc, int64_t slot) {
  AddToSlot(acc, slot, t.device(), "SumSquaresInto",
            [&] { return MOE_DISPATCH(t, SumSquares(t)); });
}

void GatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  MOE_CHECK(index.dtype() == DType::kI32 && index.numel() == dst.dim(0) &&
            src.dim(1) == dst.dim(1) && src.dtype() == dst.dtype())
      << "GatherRows: src " << src.ShapeString() << ", index " << index.ShapeString() << ", dst "
      << dst.ShapeString();
  return MOE_DISPATCH(dst, GatherRows(src, index, dst));
}

void ScatterAddRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  MOE_CHECK(index.dtype() == DType::kI32 && index.numel() == src.dim(0) &&
            src.dim(1) == dst.dim(1) && src.dtype() == dst.dtype())
      << "ScatterAddRows: src " << src.ShapeString() << ", index " << index.ShapeString()
      << ", dst " << dst.ShapeString();
  return MOE_DISPATCH(dst, ScatterAddRows(src, index, dst));
}

void CopyColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                 int64_t width, int64_t broadcast) {
  MOE_CHECK(src.ndim() == 2 && dst.ndim() == 2 && broadcast >= 1 &&
            dst.dim(0) == src.dim(0) * broadcast && width >= 0 && src_col >= 0 && dst_col >= 0 &&
            src_col + width <= src.dim(1) && dst_col + width <= dst.dim(1) &&
            src.dtype() == dst.dtype())
      << "CopyColumns: src " << src.ShapeString() << " cols [" << src_col << ", +" << width
      << ") into dst " << dst.ShapeString() << " at " << dst_col << ", broadcast " << broadcast;
  return MOE_DISPATCH(dst, CopyColumns(src, src_col, dst, dst_col, width, broadcast));
}

void SumColumns(const Tensor& src, int64_t src_col, const Tensor& dst, int64_t dst_col,
                int64_t width, int64_t group) {
  MOE_CHECK(src.ndim() == 2 && dst.ndim() == 2 && group >= 1 && src.dim(0) == dst.dim(0) * group &&
            width >= 0 && src_col >= 0 && dst_col >= 0 && src_col + width <= src.dim(1) &&
            dst_col + width <= dst.dim(1) && src.dtype() == dst.dtype())
      << "SumColumns: src " << src.ShapeString() << " cols [" << src_col << ", +" << width
      << ") into dst " << dst.ShapeString() << " at " << dst_col << ", group " << group;
  return MOE_DISPATCH(dst, SumColumns(src, src_col, dst, dst_col, width, group));
}

void Convert(const Tensor& src, const Tensor& dst) {
  MOE_CHECK(src.numel() == dst.numel() && src.device() == dst.device())
      << "Convert: " << DTypeName(src.dtype()) << src.ShapeString() << " on "
      << src.device().ToString() << " into " << DTypeName(dst.dtype()) << dst.ShapeString()
      << " on " << dst.device().ToString();
  return MOE_DISPATCH(dst, Convert(src, dst));
}

void FillUniform(const Tensor& t, uint64_t seed) {
  MOE_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF64 || t.dtype() == DType::kBF16)
      << "FillUniform: a " << DTypeName(t.dtype()) << " tensor (f32, f64 or bf16)";
  return MOE_DISPATCH(t, FillUniform(t, seed));
}

}  // namespace moe::kernels
