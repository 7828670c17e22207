// AdamW, fused elementwise, one tensor or a whole flat bucket a launch: the kernels of
// kernels/cuda/optimizer.cu, which launches them. nvcc compiles them there; a host compiler
// compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path
// (ctest gpu_kernels_emulated).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (optimizer.cu, or the emulated test).
namespace {

// The constants of one AdamW step (the host's doubles as the kernels use them).
struct AdamWArgs {
  float lr, b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2, gs;
  const double* norm_sq;  // clipping from the device's norm (no host read), or null: gs as given
  double grad_clip;
  bool norm_fp32;
};

// The step's constants from its config, on the host: the betas as the kernels read them (fp32) in
// the bias corrections too.
inline AdamWArgs AdamWArgsFor(const AdamWConfig& cfg) {
  const float b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
  const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(cfg.step));
  AdamWArgs a;
  a.lr = static_cast<float>(cfg.lr);
  a.b1 = b1;
  a.b2 = b2;
  a.eps = static_cast<float>(cfg.eps);
  a.wd = static_cast<float>(cfg.weight_decay);
  a.inv_bc1 = static_cast<float>(1.0 / bc1);
  a.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  a.gs = static_cast<float>(cfg.grad_scale);
  a.norm_sq = cfg.norm_sq;
  a.grad_clip = cfg.grad_clip;
  a.norm_fp32 = cfg.norm_fp32;
  return a;
}

// The gradient scale of this step, or false when the step is skipped (a non-finite norm, a bad
// batch on some rank): every thread of every block decides the same.
__device__ inline bool AdamWScale(const AdamWArgs& a, float* gs) {
  *gs = a.gs;
  if (a.norm_sq == nullptr) return true;
  const double scale = ClipScale(a.norm_sq[0], a.norm_sq[1], a.grad_clip, a.norm_fp32);
  if (scale != scale || a.norm_sq[2] != 0) return false;
  *gs = static_cast<float>(scale);
  return true;
}

// One element: the moments and the master weight updated in place; returns the new weight.
template <typename M>
__device__ inline float AdamWElement(float* p, float g, M* m, M* v, float wd, float gs,
                                     const AdamWArgs& a) {
  const float gi = g * gs;
  const float mi = a.b1 * Ld(*m) + (1.f - a.b1) * gi;
  const float vi = a.b2 * Ld(*v) + (1.f - a.b2) * gi * gi;
  *m = Cvt<M>(mi);
  *v = Cvt<M>(vi);
  const float update = (mi * a.inv_bc1) / (sqrtf(vi) * a.inv_sqrt_bc2 + a.eps);
  *p -= a.lr * (update + wd * *p);
  return *p;
}

template <typename M>
__global__ void AdamWKernel(float* p, const float* g, M* m, M* v, int64_t n, AdamWArgs a) {
  float gs;
  if (!AdamWScale(a, &gs)) return;
  MOE_CUDA_LOOP(i, n) AdamWElement(p + i, g[i], m + i, v + i, a.wd, gs, a);
}

// AdamW over every parameter of a flat bucket in one launch (a multi-tensor apply): block b takes
// chunk b of the table (at most kAdamWChunkElements), chunks[2b] its first element (the bucket's
// flat index e) and chunks[2b+1] its length << 1 | 1 where the parameter decays. Element e reads
// master[e - master_offset], grad[e], m and v[e - moments_offset] and, when `compute` is given,
// writes the updated master there as C (the bf16 copy the layers read): the master-to-compute pass
// fused in.
template <typename M, typename C>
__global__ void AdamWMultiKernel(const int64_t* chunks, float* master, int64_t master_offset,
                                 const float* grad, M* m, M* v, int64_t moments_offset, C* compute,
                                 AdamWArgs a) {
  float gs;
  if (!AdamWScale(a, &gs)) return;
  const int64_t first = chunks[2 * blockIdx.x], word = chunks[2 * blockIdx.x + 1];
  const int len = static_cast<int>(word >> 1);
  const float wd = (word & 1) != 0 ? a.wd : 0.f;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    const int64_t e = first + j, mo = e - moments_offset;
    const float p = AdamWElement(master + (e - master_offset), grad[e], m + mo, v + mo, wd, gs, a);
    if (compute != nullptr) compute[e] = Cvt<C>(p);
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
