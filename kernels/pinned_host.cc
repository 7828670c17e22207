#include "kernels/pinned_host.h"

#ifdef MOE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace moe::kernels {

#ifdef MOE_WITH_CUDA

void* AllocPinnedHost(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) == cudaSuccess) return p;
  cudaGetLastError();  // no pinned memory (no device, or too much locked): the caller falls back
  return nullptr;
}

void FreePinnedHost(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

#else

void* AllocPinnedHost(size_t) { return nullptr; }
void FreePinnedHost(void*) {}

#endif

}  // namespace moe::kernels
