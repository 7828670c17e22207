// Device dispatch of the attention family (kernels/attention.h): shapes, then the CPU or CUDA path.
#include "kernels/attention.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(AttentionForward)
MOE_KERNEL_BACKENDS(AttentionBackward)

namespace {

void CheckShapes(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len,
                 int64_t heads, const Tensor& out, const Tensor& lse) {
  const int64_t t = batch * seq_len;
  MOE_CHECK(heads > 0 && q.ndim() == 2 && q.dim(0) == t && q.dim(1) % heads == 0 &&
            k.shape() == q.shape() && v.ndim() == 2 && v.dim(0) == t && v.dim(1) % heads == 0 &&
            out.shape() == v.shape() && lse.numel() == batch * heads * seq_len &&
            q.dtype() == k.dtype() && q.dtype() == v.dtype())
      << "Attention: q " << q.ShapeString() << ", k " << k.ShapeString() << ", v "
      << v.ShapeString() << ", out " << out.ShapeString() << ", lse " << lse.ShapeString()
      << " for batch " << batch << ", seq " << seq_len << ", heads " << heads;
}

}  // namespace

void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                      int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                      const Tensor& lse) {
  CheckShapes(q, k, v, batch, seq_len, heads, out, lse);
  return MOE_DISPATCH(out, AttentionForward(q, k, v, batch, seq_len, heads, scale, out, lse));
}

void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t batch, int64_t seq_len,
                       int64_t heads, double scale, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv) {
  CheckShapes(q, k, v, batch, seq_len, heads, out, lse);
  MOE_CHECK(dout.shape() == out.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() &&
            dv.shape() == v.shape())
      << "AttentionBackward: dout " << dout.ShapeString() << ", dq " << dq.ShapeString() << ", dk "
      << dk.ShapeString() << ", dv " << dv.ShapeString();
  return MOE_DISPATCH(
      dq, AttentionBackward(q, k, v, out, dout, lse, batch, seq_len, heads, scale, dq, dk, dv));
}

}  // namespace moe::kernels
