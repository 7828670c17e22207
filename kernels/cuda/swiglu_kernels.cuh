// SwiGLU forward and backward: the kernels of kernels/cuda/swiglu.cu, which launches them.
// nvcc compiles them there; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// runs them on the CPU against the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (swiglu.cu, or the emulated test).
namespace {

template <typename T>
__global__ void SwigluForwardKernel(const T* gu, T* out, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]);
    out[i] = Cvt<T>(g / (1.f + expf(-g)) * u);
  }
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* gu, const T* dout, T* dgu, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]), dy = Ld(dout[i]);
    const float sig = 1.f / (1.f + expf(-g));
    dgu[r * 2 * f + f + j] = Cvt<T>(dy * g * sig);
    dgu[r * 2 * f + j] = Cvt<T>(dy * u * sig * (1.f + g * (1.f - sig)));
  }
}

// The same, 16 bytes a load and a store (8 bf16 or 4 floats of a row) with 32-bit indices, where f
// is a multiple of the lanes (a vector never straddles gate and up) and every pointer is 16-byte
// aligned (swiglu.cu checks): each element computed exactly as above.
template <typename T>
__global__ void SwigluForwardVecKernel(const T* gu, T* out, int64_t rows, int64_t f) {
  constexpr int L = Vec16<T>::kLanes;
  const uint32_t fv = static_cast<uint32_t>(f / L);
  MOE_CUDA_LOOP32(i, rows * (f / L)) {
    const uint32_t r = i / fv, jv = i % fv;
    const auto* row = reinterpret_cast<const Vec16<T>*>(gu + static_cast<int64_t>(r) * 2 * f);
    const Vec16<T> g = row[jv], u = row[fv + jv];
    Vec16<T> o;
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const float gl = Ld(g.v[l]);
      o.v[l] = Cvt<T>(gl / (1.f + expf(-gl)) * Ld(u.v[l]));
    }
    reinterpret_cast<Vec16<T>*>(out)[i] = o;
  }
}

template <typename T>
__global__ void SwigluBackwardVecKernel(const T* gu, const T* dout, T* dgu, int64_t rows,
                                        int64_t f) {
  constexpr int L = Vec16<T>::kLanes;
  const uint32_t fv = static_cast<uint32_t>(f / L);
  MOE_CUDA_LOOP32(i, rows * (f / L)) {
    const uint32_t r = i / fv, jv = i % fv;
    const int64_t base = static_cast<int64_t>(r) * 2 * f;
    const auto* row = reinterpret_cast<const Vec16<T>*>(gu + base);
    const Vec16<T> g = row[jv], u = row[fv + jv], dy = reinterpret_cast<const Vec16<T>*>(dout)[i];
    Vec16<T> dg, du;
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const float gl = Ld(g.v[l]), ul = Ld(u.v[l]), d = Ld(dy.v[l]);
      const float sig = 1.f / (1.f + expf(-gl));
      du.v[l] = Cvt<T>(d * gl * sig);
      dg.v[l] = Cvt<T>(d * ul * sig * (1.f + gl * (1.f - sig)));
    }
    auto* out = reinterpret_cast<Vec16<T>*>(dgu + base);
    out[fv + jv] = du;
    out[jv] = dg;
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
