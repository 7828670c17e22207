// Device dispatch of the cross-entropy family (kernels/cross_entropy.h): shapes, then the CPU or
// CUDA path.
#include "kernels/cross_entropy.h"

#include "kernels/dispatch.h"
#include "kernels/runtime.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(CrossEntropy)

namespace {

double Checked(const Tensor& logits, const Tensor& targets, double grad_scale,
               const Tensor& dlogits) {
  const int64_t rows = logits.dim(0);
  MOE_CHECK(targets.dtype() == DType::kI32 && targets.numel() == rows)
      << "CrossEntropy: targets " << targets.ShapeString();
  MOE_CHECK(!dlogits.defined() || dlogits.shape() == logits.shape())
      << "CrossEntropy: dlogits " << dlogits.ShapeString();
  MOE_CHECK(!dlogits.defined() || dlogits.dtype() == logits.dtype() ||
            (logits.dtype() == DType::kF32 && dlogits.dtype() == DType::kBF16))
      << "CrossEntropy: a " << DTypeName(dlogits.dtype()) << " gradient of "
      << DTypeName(logits.dtype()) << " logits (the same dtype, or bf16 of f32)";
  return MOE_DISPATCH(logits, CrossEntropy(logits, targets, grad_scale, dlogits));
}

}  // namespace

double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                    const Tensor& dlogits) {
  CountHostSync();
  return Checked(logits, targets, grad_scale, dlogits);
}

void CrossEntropyInto(const Tensor& logits, const Tensor& targets, double grad_scale,
                      const Tensor& dlogits, const Tensor& acc, int64_t slot) {
  AddToSlot(acc, slot, logits.device(), "CrossEntropyInto",
            [&] { return Checked(logits, targets, grad_scale, dlogits); });
}

}  // namespace moe::kernels
