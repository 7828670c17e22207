// Device dispatch of the permute family (kernels/permute.h): the dispatch plan built on the host
// (the reference) or on the routing's device; the row movements' shapes, then the CPU or CUDA path.
#include "kernels/permute.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(BuildDispatchPlanOnDevice)
MOE_KERNEL_BACKENDS(PermuteBackward)
MOE_KERNEL_BACKENDS(CombineForward)
MOE_KERNEL_BACKENDS(CombineBackward)

void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row) {
  const int64_t tokens = topk_idx.ndim() == 2 ? topk_idx.dim(0) : -1,
                k = topk_idx.ndim() == 2 ? topk_idx.dim(1) : -1;
  MOE_CHECK(topk_idx.dtype() == DType::kI32 && tokens >= 0 && num_experts > 0 &&
            counts.dtype() == DType::kI64 && counts.shape() == Tensor::Shape{num_experts} &&
            row_of_slot.dtype() == DType::kI32 && row_of_slot.shape() == topk_idx.shape() &&
            token_of_row.dtype() == DType::kI32 &&
            token_of_row.shape() == Tensor::Shape{tokens * k} &&
            counts.device() == topk_idx.device() && row_of_slot.device() == topk_idx.device() &&
            token_of_row.device() == topk_idx.device())
      << "BuildDispatchPlanOnDevice: topk_idx " << DTypeName(topk_idx.dtype())
      << topk_idx.ShapeString() << ", " << num_experts << " experts, counts "
      << DTypeName(counts.dtype()) << counts.ShapeString() << ", row_of_slot "
      << row_of_slot.ShapeString() << ", token_of_row " << token_of_row.ShapeString()
      << " (one device)";
  return MOE_DISPATCH(topk_idx, BuildDispatchPlanOnDevice(topk_idx, num_experts, counts,
                                                          row_of_slot, token_of_row));
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  const int64_t tokens = dx.dim(0), d = dx.dim(1);
  MOE_CHECK(row_of_slot.dtype() == DType::kI32 && row_of_slot.dim(0) == tokens && dxp.dim(1) == d)
      << "PermuteBackward: dxp " << dxp.ShapeString() << ", row_of_slot "
      << row_of_slot.ShapeString() << ", dx " << dx.ShapeString();
  return MOE_DISPATCH(dx, PermuteBackward(dxp, row_of_slot, dx));
}

void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y) {
  const int64_t tokens = y.dim(0), d = y.dim(1);
  MOE_CHECK(row_of_slot.dim(0) == tokens && w.shape() == row_of_slot.shape() && yp.dim(1) == d)
      << "CombineForward: yp " << yp.ShapeString() << ", w " << w.ShapeString() << ", y "
      << y.ShapeString();
  return MOE_DISPATCH(y, CombineForward(yp, row_of_slot, w, y));
}

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w,
                     const Tensor& dyp, const Tensor& dw) {
  const int64_t tokens = dy.dim(0), d = dy.dim(1);
  MOE_CHECK(row_of_slot.dim(0) == tokens && w.shape() == row_of_slot.shape() &&
            dw.shape() == w.shape() && yp.shape() == dyp.shape() && yp.dim(1) == d)
      << "CombineBackward shapes";
  return MOE_DISPATCH(dyp, CombineBackward(dy, yp, row_of_slot, w, dyp, dw));
}

}  // namespace moe::kernels
