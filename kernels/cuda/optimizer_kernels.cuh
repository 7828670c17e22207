// AdamW, fused elementwise: the kernels of kernels/cuda/optimizer.cu, which launches them.
// nvcc compiles them there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// runs them on the CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (optimizer.cu, or the emulated test).
namespace {

template <typename M>
__global__ void AdamWKernel(float* p, const float* g, M* m, M* v, int64_t n, float lr, float b1,
                            float b2, float eps, float wd, float inv_bc1, float inv_sqrt_bc2,
                            float gs, const double* norm_sq, double grad_clip, bool norm_fp32) {
  if (norm_sq != nullptr) {  // clipping from the device's norm: no host read
    const double scale = ClipScale(norm_sq[0], norm_sq[1], grad_clip, norm_fp32);
    if (scale != scale || norm_sq[2] != 0)
      return;  // skipped: a non-finite norm, a bad batch on some rank
    gs = static_cast<float>(scale);
  }
  MOE_CUDA_LOOP(i, n) {
    const float gi = g[i] * gs;
    const float mi = b1 * Ld(m[i]) + (1.f - b1) * gi;
    const float vi = b2 * Ld(v[i]) + (1.f - b2) * gi * gi;
    m[i] = Cvt<M>(mi);
    v[i] = Cvt<M>(vi);
    const float update = (mi * inv_bc1) / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    p[i] -= lr * (update + wd * p[i]);
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
