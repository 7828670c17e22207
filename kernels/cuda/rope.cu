// RoPE on a block of columns of every head, in place (kernels/rope.h): one thread per (token, pair)
// computes the angle's cos and sin once, in double as the CPU's table is, and rotates that pair in
// every head (the shared rotary key of MLA, or the rotated part of each of 128 query heads). The
// backward is the inverse rotation (sin negated).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

void Rope(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq,
          RopeLayout layout, bool inverse, int64_t first_position, const char* op) {
  CheckOnCuda({&x, &inv_freq}, op);
  CheckF32(inv_freq, op, "inv_freq");
  const int64_t tokens = x.dim(0), pairs = inv_freq.numel(), stride = x.dim(1) / heads;
  MOE_CUDA_TYPED(StorageType({&x}, op), T, {
    if (tokens * pairs > 0) {
      RopeKernel<T><<<Blocks(tokens * pairs), kThreads, 0, Stream()>>>(
          Ptr<T>(x), tokens, seq_len, heads, stride, offset, Ptr<float>(inv_freq), pairs,
          layout == RopeLayout::kHalfSplit, inverse ? -1.0 : 1.0, first_position);
    }
  });
  CheckLaunch(op);
}

}  // namespace

void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset,
                 const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  Rope(x, seq_len, heads, offset, inv_freq, layout, false, first_position, "RopeForward");
}

void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset,
                  const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  Rope(dx, seq_len, heads, offset, inv_freq, layout, true, first_position, "RopeBackward");
}

}  // namespace moe::kernels::cuda
