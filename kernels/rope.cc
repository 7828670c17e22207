// Device dispatch of RoPE (kernels/rope.h): shapes, then the CPU or CUDA path.
#include "kernels/rope.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(RopeForward)
MOE_KERNEL_BACKENDS(RopeBackward)

namespace {

void CheckRope(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset,
               const Tensor& inv_freq, int64_t first_position) {
  const int64_t d = 2 * inv_freq.numel();
  MOE_CHECK(x.ndim() == 2 && heads > 0 && x.dim(1) % heads == 0 && seq_len > 0 && offset >= 0 &&
            first_position >= 0 && d > 0 && offset + d <= x.dim(1) / heads &&
            inv_freq.device() == x.device())
      << "Rope: x " << x.ShapeString() << ", heads " << heads << ", offset " << offset
      << ", rotated dims " << d << ", first position " << first_position;
}

}  // namespace

void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset,
                 const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  CheckRope(x, seq_len, heads, offset, inv_freq, first_position);
  return MOE_DISPATCH(x, RopeForward(x, seq_len, heads, offset, inv_freq, layout, first_position));
}

void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset,
                  const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  CheckRope(dx, seq_len, heads, offset, inv_freq, first_position);
  return MOE_DISPATCH(dx,
                      RopeBackward(dx, seq_len, heads, offset, inv_freq, layout, first_position));
}

}  // namespace moe::kernels
