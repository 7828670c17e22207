// The runtime's small kernels: the bad-index flags folded into the step's buffer, partials added in
// order: the kernels of kernels/cuda/runtime.cu, which launches them. nvcc compiles them there; a
// host compiler compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against
// the CPU path (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (runtime.cu, or the emulated test).
namespace {

__global__ void FoldBadIndicesKernel(unsigned* flags, double* dst) {
  *dst = static_cast<double>(*flags);
  *flags = 0;
}

// One thread adds the partials in order, in double: the host's sum, without the host.
template <typename P>
__global__ void AddPartialsKernel(const P* partial, int64_t n, double* dst) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += partial[i];
  *dst += total;
}

}  // namespace
}  // namespace moe::kernels::cuda
