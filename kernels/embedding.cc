// Device dispatch of the embedding family (kernels/embedding.h): shapes, then the CPU or CUDA path.
#include "kernels/embedding.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(EmbeddingForward)
MOE_KERNEL_BACKENDS(EmbeddingBackward)

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

}  // namespace moe::kernels
