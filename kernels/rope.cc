// Device dispatch of RoPE (kernels/rope.h): shapes, then the CPU or CUDA path.
#include "kernels/rope.h"

#include "kernels/dispatch.h"

namespace moe::kernels {
namespace {

void CheckQkv(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim) {
  MOE_CHECK(qkv.ndim() == 2 && qkv.dim(1) == 3 * heads * head_dim && head_dim % 2 == 0 && seq_len > 0)
      << "Rope: qkv " << qkv.ShapeString() << ", heads " << heads << ", head_dim " << head_dim;
}

}  // namespace

void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  CheckQkv(qkv, seq_len, heads, head_dim);
  return MOE_DISPATCH(qkv, RopeForward(qkv, seq_len, heads, head_dim, theta));
}

void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  CheckQkv(dqkv, seq_len, heads, head_dim);
  return MOE_DISPATCH(dqkv, RopeBackward(dqkv, seq_len, heads, head_dim, theta));
}

}  // namespace moe::kernels
