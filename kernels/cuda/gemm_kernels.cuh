// The grouped GEMM's pointer arrays, written on the device: the kernels of kernels/cuda/gemm.cu,
// which launches them. nvcc compiles them there; a host compiler compiles them under
// tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path (ctest
// gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (gemm.cu, or the emulated test).
namespace {

// The pointer arrays cublasGemmGroupedBatchedEx reads live in device memory: a kernel writes them
// from its argument (3 KB for 128 pieces), so no host-to-device copy is queued.
constexpr int kMaxPieces = 128;
struct PiecePointers {
  const void* a[kMaxPieces];
  const void* b[kMaxPieces];
  void* c[kMaxPieces];
};
__global__ void WritePointersKernel(PiecePointers p, int n, const void** a, const void** b,
                                    void** c) {
  const int i = threadIdx.x;
  if (i < n) a[i] = p.a[i], b[i] = p.b[i], c[i] = p.c[i];
}

}  // namespace
}  // namespace moe::kernels::cuda
