// Device dispatch of the embedding family (kernels/embedding.h): shapes, then the CPU or CUDA path.
#include "kernels/embedding.h"

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(EmbeddingForward)
MOE_KERNEL_BACKENDS(EmbeddingBackward)
MOE_CPU_KERNEL(EmbeddingBackwardAccumulate)

void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out) {
  MOE_CHECK(ids.dtype() == DType::kI32 && out.dim(0) == ids.numel() && out.dim(1) == table.dim(1))
      << "EmbeddingForward: table " << table.ShapeString() << ", ids " << ids.ShapeString()
      << ", out " << out.ShapeString();
  return MOE_DISPATCH(out, EmbeddingForward(table, ids, out));
}

void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  MOE_CHECK(ids.dtype() == DType::kI32 && dout.dim(0) == ids.numel() &&
            dout.dim(1) == dtable.dim(1))
      << "EmbeddingBackward: dout " << dout.ShapeString() << ", ids " << ids.ShapeString()
      << ", dtable " << dtable.ShapeString();
  return MOE_DISPATCH(dtable, EmbeddingBackward(dout, ids, dtable));
}

void EmbeddingBackwardAccumulate(const Tensor& dout, const Tensor& ids, const Tensor& acc) {
  MOE_CHECK(ids.dtype() == DType::kI32 && dout.dim(0) == ids.numel() && acc.ndim() == 2 &&
            dout.dim(1) == acc.dim(1) && acc.dtype() == DType::kF64 &&
            (dout.dtype() == DType::kF32 || dout.dtype() == DType::kBF16))
      << "EmbeddingBackwardAccumulate: dout " << DTypeName(dout.dtype()) << dout.ShapeString()
      << " (fp32 or bf16), ids " << ids.ShapeString() << ", acc " << DTypeName(acc.dtype())
      << acc.ShapeString() << " (f64)";
  if (acc.device().is_cpu()) return cpu::EmbeddingBackwardAccumulate(dout, ids, acc);
  // Elsewhere: the fp32 table of sums, then its f64 sum (the steps the CPU path fuses).
  const Tensor sums = Tensor::Zeros(acc.shape(), DType::kF32, acc.device());
  EmbeddingBackward(dout, ids, sums);
  const Tensor wide = Tensor::Empty(acc.shape(), DType::kF64, acc.device());
  Convert(sums, wide);
  Axpy(acc, 1.0, wide);
}

}  // namespace moe::kernels
