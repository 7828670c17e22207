// Device dispatch of the attention family (kernels/attention.h): shapes, then the CPU or CUDA path.
#include "kernels/attention.h"

#include "kernels/dispatch.h"

namespace moe::kernels {
namespace {

void CheckQkv(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim) {
  MOE_CHECK(qkv.ndim() == 2 && qkv.dim(0) == batch * seq_len && qkv.dim(1) == 3 * heads * head_dim)
      << "Attention: qkv " << qkv.ShapeString() << " for batch " << batch << ", seq " << seq_len << ", heads " << heads
      << ", head_dim " << head_dim;
}

}  // namespace

void AttentionForward(const Tensor& qkv, int64_t batch, int64_t seq_len, int64_t heads, int64_t head_dim,
                      const Tensor& out, const Tensor& probs) {
  CheckQkv(qkv, batch, seq_len, heads, head_dim);
  MOE_CHECK(out.dim(0) == batch * seq_len && out.dim(1) == heads * head_dim && probs.numel() == batch * heads * seq_len * seq_len)
      << "AttentionForward: out " << out.ShapeString() << ", probs " << probs.ShapeString();
  return MOE_DISPATCH(out, AttentionForward(qkv, batch, seq_len, heads, head_dim, out, probs));
}

void AttentionBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, int64_t batch, int64_t seq_len,
                       int64_t heads, int64_t head_dim, const Tensor& dqkv) {
  CheckQkv(qkv, batch, seq_len, heads, head_dim);
  MOE_CHECK(dqkv.shape() == qkv.shape() && dout.dim(0) == batch * seq_len && dout.dim(1) == heads * head_dim)
      << "AttentionBackward: dqkv " << dqkv.ShapeString() << ", dout " << dout.ShapeString();
  return MOE_DISPATCH(dqkv, AttentionBackward(qkv, probs, dout, batch, seq_len, heads, head_dim, dqkv));
}

}  // namespace moe::kernels
