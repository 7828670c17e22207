// CUPTI's activity API through dlopen (kernel_trace.h). Only the records' leading fields are read
// (kind; a kernel's start and end; a copy's kind and bytes): they sit at the same offsets in the
// records every CUDA 11-13 libcupti writes (Kernel4 and later; only the first two versions
// differed), so a libcupti older or newer than these headers reads the same.
#include "bench/kernel_trace.h"

#ifdef MOE_WITH_CUPTI
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#endif

namespace moe::bench {

#ifdef MOE_WITH_CUPTI
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

struct Api {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

Api g_api;
std::mutex g_mu;
TraceCounts g_counts;                              // under g_mu
std::atomic<bool> g_active{false}, g_lost{false};  // g_lost: a buffer CUPTI asked for was not given

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer == nullptr ? 0 : kBufferBytes;
  if (*buffer == nullptr) g_lost = true;  // CUPTI drops the records it had no room for
  *max_records = 0;                       // as many as fit
}

void Count(const CUpti_Activity* r, TraceCounts* c) {
  if (r->kind == CUPTI_ACTIVITY_KIND_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    ++c->kernels;
    if (k->end > k->start) c->kernel_seconds += static_cast<double>(k->end - k->start) * 1e-9;
  } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
    const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
    ++c->copies;
    if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)
      c->h2d_bytes += static_cast<int64_t>(m->bytes);
    if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)
      c->d2h_bytes += static_cast<int64_t>(m->bytes);
  }
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  TraceCounts got;
  CUpti_Activity* record = nullptr;
  while (g_api.next_record(buffer, valid, &record) == CUPTI_SUCCESS) Count(record, &got);
  std::free(buffer);
  std::lock_guard lock(g_mu);
  g_counts.kernels += got.kernels;
  g_counts.kernel_seconds += got.kernel_seconds;
  g_counts.copies += got.copies;
  g_counts.h2d_bytes += got.h2d_bytes;
  g_counts.d2h_bytes += got.d2h_bytes;
}

// libcupti from the loader's path, then the toolkit's usual folders.
void* OpenCupti(std::string* tried) {
  for (const char* name :
       {"libcupti.so", "libcupti.so.13", "libcupti.so.12",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
        "/usr/local/cuda/lib/libcupti.so"}) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    *tried += std::string(tried->empty() ? "" : ", ") + name;
  }
  return nullptr;
}

template <typename T>
bool Load(void* lib, const char* name, T* fn) {
  *fn = reinterpret_cast<T>(dlsym(lib, name));
  return *fn != nullptr;
}

std::string Why(const char* what, CUptiResult r) {
  const char* s = nullptr;
  if (g_api.result_string != nullptr) g_api.result_string(r, &s);
  return std::string(what) + ": " + (s != nullptr ? s : "CUPTI error " + std::to_string(r));
}

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::Start(std::string* problem) {
  if (g_active.exchange(true)) {
    *problem = "a kernel trace is running already";
    return nullptr;
  }
  static void* lib = nullptr;
  std::string tried;
  if (lib == nullptr && (lib = OpenCupti(&tried)) == nullptr) {
    *problem = "libcupti not found (tried " + tried + ")";
    g_active = false;
    return nullptr;
  }
  if (!Load(lib, "cuptiActivityRegisterCallbacks", &g_api.register_callbacks) ||
      !Load(lib, "cuptiActivityEnable", &g_api.enable) ||
      !Load(lib, "cuptiActivityDisable", &g_api.disable) ||
      !Load(lib, "cuptiActivityFlushAll", &g_api.flush_all) ||
      !Load(lib, "cuptiActivityGetNextRecord", &g_api.next_record) ||
      !Load(lib, "cuptiGetResultString", &g_api.result_string)) {
    *problem = "libcupti lacks the activity API";
    g_active = false;
    return nullptr;
  }
  CUptiResult r = g_api.register_callbacks(BufferRequested, BufferCompleted);
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY}) {
    if (r == CUPTI_SUCCESS) r = g_api.enable(k);
  }
  if (r != CUPTI_SUCCESS) {
    *problem = Why("starting CUPTI's activity records", r);
    g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);  // whichever had started
    g_api.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
    g_active = false;
    return nullptr;
  }
  g_lost = false;
  {
    std::lock_guard lock(g_mu);
    g_counts = TraceCounts();
  }
  return std::unique_ptr<KernelTrace>(new KernelTrace());
}

KernelTrace::~KernelTrace() {
  g_api.flush_all(0);
  g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_api.disable(CUPTI_ACTIVITY_KIND_MEMCPY);
  g_active = false;
}

TraceCounts KernelTrace::Take() {
  // Every buffer, the partly filled one too (the device is idle): BufferCompleted has them all
  // back.
  const CUptiResult r = g_api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(g_mu);
  TraceCounts out = g_counts;
  g_counts = TraceCounts();
  if (r != CUPTI_SUCCESS) out.incomplete = Why("flushing CUPTI's records", r);
  if (g_lost) out.incomplete = "CUPTI dropped records: no memory for its buffers";
  return out;
}

#else

std::unique_ptr<KernelTrace> KernelTrace::Start(std::string* problem) {
  *problem = "this build has no CUDA (no CUPTI)";
  return nullptr;
}
KernelTrace::~KernelTrace() = default;
TraceCounts KernelTrace::Take() { return {}; }

#endif

}  // namespace moe::bench
