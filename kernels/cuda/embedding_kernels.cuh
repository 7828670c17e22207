// Embedding lookup and its atomic scatter-add gradient: the kernels of kernels/cuda/embedding.cu,
// which launches them. nvcc compiles them there; a host compiler compiles them under
// tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path (ctest
// gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (embedding.cu, or the emulated test).
namespace {

template <typename T>
__global__ void EmbeddingForwardKernel(const T* table, const int32_t* ids, T* out, int64_t tokens,
                                       int64_t d, int64_t vocab, unsigned* bad) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t id = ids[i / d];
    out[i] = InRange(id, vocab, bad, kBadTokenId) ? table[id * d + i % d] : Cvt<T>(0.f);
  }
}
template <typename T>
__global__ void EmbeddingBackwardKernel(const T* dout, const int32_t* ids, float* dtable,
                                        int64_t tokens, int64_t d, int64_t vocab, unsigned* bad) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t id = ids[i / d];
    if (InRange(id, vocab, bad, kBadTokenId)) atomicAdd(&dtable[id * d + i % d], Ld(dout[i]));
  }
}

}  // namespace
}  // namespace moe::kernels::cuda
