// Page-locked (pinned) host memory, for copies from a GPU that a host thread then reads (the
// asynchronous checkpoint's snapshot): cudaMallocHost when CUDA is compiled in and a device is
// there, else nullptr (the caller falls back to ordinary memory).
#pragma once

#include <cstddef>

namespace moe::kernels {

void* AllocPinnedHost(size_t bytes);  // nullptr when pinned memory cannot be had
void FreePinnedHost(void* ptr);       // of AllocPinnedHost's; nullptr is ignored

}  // namespace moe::kernels
