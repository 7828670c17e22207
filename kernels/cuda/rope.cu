// RoPE on a block of columns of every head, in place (kernels/rope.h): one thread per (token, pair)
// computes the angle's cos and sin once, in double as the CPU's table is, and rotates that pair in
// every head (the shared rotary key of MLA, or the rotated part of each of 128 query heads). The
// backward is the inverse rotation (sin negated).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

// x [tokens, heads * stride]; pair j of head h: columns h*stride + offset + (j, j + pairs) when
// half-split, (2j, 2j + 1) when adjacent.
template <typename T>
__global__ void RopeKernel(T* x, int64_t tokens, int64_t seq_len, int64_t heads, int64_t stride,
                           int64_t offset, const float* inv_freq, int64_t pairs, bool half_split,
                           double sign, int64_t first_position) {
  MOE_CUDA_LOOP(i, tokens * pairs) {
    const int64_t t = i / pairs, j = i % pairs;
    double s, c;
    sincos(static_cast<double>(first_position + t % seq_len) * static_cast<double>(inv_freq[j]), &s,
           &c);
    const float cf = static_cast<float>(c), sf = static_cast<float>(sign * s);
    const int64_t a = half_split ? j : 2 * j, b = half_split ? j + pairs : 2 * j + 1;
    T* row = x + t * heads * stride + offset;
    for (int64_t h = 0; h < heads; ++h) {
      T* p = row + h * stride;
      const float x1 = Ld(p[a]), x2 = Ld(p[b]);
      p[a] = Cvt<T>(x1 * cf - x2 * sf);
      p[b] = Cvt<T>(x1 * sf + x2 * cf);
    }
  }
}

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
