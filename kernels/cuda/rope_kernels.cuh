// RoPE, in place: the kernels of kernels/cuda/rope.cu, which launches them.
// nvcc compiles them there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// runs them on the CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (rope.cu, or the emulated test).
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
    // Position first_position + t % seq_len (decoding: the cache's length before these tokens).
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

}  // namespace
}  // namespace moe::kernels::cuda
