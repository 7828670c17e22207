// Checks of the materialised attention (kernels/attention_materialized.h), then its CPU path: it
// has no CUDA path on purpose (a reference for comparisons, never a GPU training path).
#include "kernels/attention_materialized.h"

#include "common/check.h"
#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_CPU_KERNEL(MaterializedAttentionForward)
MOE_CPU_KERNEL(MaterializedAttentionBackward)

namespace {

void CheckShapes(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq_len,
                 int64_t heads, const Tensor& probs) {
  const int64_t t = batch * seq_len;
  MOE_CHECK(heads > 0 && q.ndim() == 2 && q.dim(0) == t && q.dim(1) % heads == 0 &&
            k.shape() == q.shape() && v.ndim() == 2 && v.dim(0) == t && v.dim(1) % heads == 0 &&
            probs.numel() == batch * heads * seq_len * seq_len &&
            probs.dtype() == AccumType(q.dtype()) && q.dtype() == k.dtype() &&
            q.dtype() == v.dtype())
      << "MaterializedAttention: q " << q.ShapeString() << ", k " << k.ShapeString() << ", v "
      << v.ShapeString() << ", probs " << probs.ShapeString() << " " << DTypeName(probs.dtype())
      << " for batch " << batch << ", seq " << seq_len << ", heads " << heads;
  for (const Tensor* x : {&q, &k, &v, &probs}) {
    MOE_CHECK(x->device().is_cpu())
        << "MaterializedAttention: a " << x->device().ToString()
        << " tensor; the materialised attention is CPU only (spec.training.attention: "
           "flash on GPUs)";
  }
}

}  // namespace

void MaterializedAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                                  int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                                  const Tensor& probs) {
  CheckShapes(q, k, v, batch, seq_len, heads, probs);
  MOE_CHECK(out.shape() == v.shape() && out.device().is_cpu())
      << "MaterializedAttentionForward: out " << out.ShapeString() << " on "
      << out.device().ToString();
  cpu::MaterializedAttentionForward(q, k, v, batch, seq_len, heads, scale, out, probs);
}

void MaterializedAttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& probs, const Tensor& dout, int64_t batch,
                                   int64_t seq_len, int64_t heads, double scale, const Tensor& dq,
                                   const Tensor& dk, const Tensor& dv) {
  CheckShapes(q, k, v, batch, seq_len, heads, probs);
  MOE_CHECK(dout.ndim() == 2 && dout.dim(0) == v.dim(0) && dout.dim(1) == v.dim(1) &&
            dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape() &&
            dq.device().is_cpu())
      << "MaterializedAttentionBackward: dout " << dout.ShapeString() << ", dq " << dq.ShapeString()
      << ", dk " << dk.ShapeString() << ", dv " << dv.ShapeString();
  cpu::MaterializedAttentionBackward(q, k, v, probs, dout, batch, seq_len, heads, scale, dq, dk,
                                     dv);
}

size_t MaterializedAttentionProbsBytes(int64_t batch, int64_t seq_len, int64_t heads, DType dtype) {
  return static_cast<size_t>(batch * heads * seq_len * seq_len) * DTypeSize(AccumType(dtype));
}

}  // namespace moe::kernels
