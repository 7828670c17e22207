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

}  // namespace
}  // namespace moe::kernels::cuda
