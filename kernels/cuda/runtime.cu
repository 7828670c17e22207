// The CUDA runtime of the kernels: device selection and facts, the stream kernels run on, the
// caching allocator behind CUDA tensors, the shared cuBLAS handle, the checks and helpers every
// family's entry points use (kernels/cuda/common.cuh), and the bf16 GEMM peak measurement.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/status.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/runtime_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"
#include "kernels/upload_ring.h"

namespace moe::kernels::cuda {
namespace {

// Device memory through the caching allocator, so a training step never calls cudaMalloc once warm.
// One process drives one device (the trainer calls cudaSetDevice once), so one cache serves it.
class CudaAllocator final : public CachingAllocator {
 public:
  CudaAllocator() : uploads_(size_t{8} << 20, UploadHooks()) {}
  // Every copy and fill is queued on the kernels' stream (none on the legacy default stream).
  void Memset(void* ptr, int value, size_t bytes) override {
    MOE_CHECK(cudaMemsetAsync(ptr, value, bytes, Stream()) == cudaSuccess) << LastError();
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    CountHostSync();  // a blocking copy: the host waits for the device's queue
    MOE_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, Stream()) == cudaSuccess &&
              cudaStreamSynchronize(Stream()) == cudaSuccess)
        << LastError();
  }
  // Small uploads queue behind the kernels through the pinned ring (kernels/upload_ring.h); larger
  // ones (weights, checkpoints) and any the ring refuses are queued from the caller's pageable
  // memory (the call returns once the bytes are staged).
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    if (uploads_.Upload(dst, src, bytes)) return;
    // From pageable memory the call returns once `src` has been read: the caller may reuse it.
    MOE_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, Stream()) == cudaSuccess)
        << LastError();
  }
  void CopyWithin(void* dst, const void* src, size_t bytes) override {
    MOE_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, Stream()) == cudaSuccess)
        << LastError();
  }

 protected:
  void* RawAllocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess) return p;
    cudaGetLastError();  // clear the out-of-memory error: the caller releases the cache and retries
    return nullptr;
  }
  void RawFree(void* ptr) override { cudaFree(ptr); }
  size_t Granularity() const override { return 512; }
  // A freed block that another stream used waits for this event on that stream (tensor.h).
  EventHandle RecordEvent(StreamHandle stream) override {
    cudaEvent_t e = nullptr;
    MOE_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess) << LastError();
    MOE_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream)) == cudaSuccess) << LastError();
    return e;
  }
  bool EventDone(EventHandle event) override {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (r == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: the stream has not reached it yet
      return false;
    }
    MOE_CHECK(r == cudaSuccess) << LastError();
    return true;
  }
  void WaitEvent(EventHandle event) override {
    MOE_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)) == cudaSuccess) << LastError();
  }
  void DestroyEvent(EventHandle event) override {
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

 private:
  // The pinned ring's device side: its copies and events on the kernels' stream (the events are the
  // ones above).
  UploadRing::Hooks UploadHooks() {
    UploadRing::Hooks h;
    h.alloc_pinned = [](size_t n) -> void* {
      void* p = nullptr;
      if (cudaMallocHost(&p, n) == cudaSuccess) return p;
      cudaGetLastError();  // no pinned memory: uploads stay synchronous
      return nullptr;
    };
    h.free_pinned = [](void* p) { cudaFreeHost(p); };
    h.copy_async = [](void* dst, const void* staged, size_t bytes) {
      MOE_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, Stream()) ==
                cudaSuccess)
          << LastError();
    };
    h.record_event = [this] { return RecordEvent(Stream()); };
    h.event_done = [this](UploadRing::Event e) { return EventDone(e); };
    h.wait_event = [this](UploadRing::Event e) { WaitEvent(e); };
    h.destroy_event = [this](UploadRing::Event e) { DestroyEvent(e); };
    return h;
  }
  // Small uploads (8 MiB of pinned memory; uploads above 4 MiB go straight from pageable memory).
  UploadRing uploads_;
};

}  // namespace

// ---- Helpers of the family files (common.cuh) ----

// One stream per device, created on first use on that device and kept for the process. A blocking
// stream (cudaStreamDefault): work that something still queues on the legacy stream (a synchronous
// cudaMemcpy of a staging path) stays ordered with it, as before; nothing of ours is queued there,
// so the stream can be captured into a CUDA graph.
cudaStream_t Stream() {
  constexpr int kMaxDevices = 64;
  static std::atomic<cudaStream_t> streams[kMaxDevices] = {};
  static std::mutex create;
  int device = 0;
  MOE_CHECK(cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < kMaxDevices)
      << "the kernels' stream: no current CUDA device (" << LastError() << ")";
  cudaStream_t s = streams[device].load(std::memory_order_acquire);
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(create);
  s = streams[device].load(std::memory_order_relaxed);
  if (s == nullptr) {
    MOE_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault) == cudaSuccess)
        << "cudaStreamCreate on cuda:" << device << ": " << LastError();
    streams[device].store(s, std::memory_order_release);
  }
  return s;
}

std::string LastError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void RegisterCudaAllocator() {
  static CudaAllocator* a = new CudaAllocator();
  RegisterAllocator(DeviceType::kCuda, a);
}

Device CurrentDevice() {
  int index = 0;
  cudaGetDevice(&index);
  return Device::Cuda(index);
}

#define MOE_SYMBOL_NAME2(x) #x
#define MOE_SYMBOL_NAME(x) \
  MOE_SYMBOL_NAME2(x)  // expands cublas_v2.h's macros: cublasCreate -> cublasCreate_v2

void* OpenToolkitLibrary(const std::string& name, std::string* tried) {
  Dl_info info{};
  tried->clear();
  auto try_dir = [&](std::string dir) -> void* {
    if (!dir.empty() && dir.back() != '/') dir += '/';
    *tried += (tried->empty() ? "" : ", ") + dir + name;
    return dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL);
  };
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) != 0 &&
      info.dli_fname != nullptr) {
    const std::string path = info.dli_fname;
    if (void* lib = try_dir(path.substr(0, path.find_last_of('/') + 1))) return lib;
  }
  // Folders named by MOE_CUDA_LIB_DIRS (':'-separated): tests/gpu/check.sh sets it to the Python
  // environment's NVIDIA wheels' library folders (nvidia/cu13/lib, nvidia/cublas/lib), whose
  // libcublas an image may have where its toolkit has none.
  if (const char* dirs = std::getenv("MOE_CUDA_LIB_DIRS"); dirs != nullptr) {
    const std::string all = dirs;
    for (size_t b = 0, e; b < all.size(); b = e + 1) {
      e = all.find(':', b);
      if (e == std::string::npos) e = all.size();
      if (e == b) continue;
      if (void* lib = try_dir(all.substr(b, e - b))) return lib;
    }
  }
  *tried += (tried->empty() ? "" : ", ") + name;
  return dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
}

namespace {
// The API, or why it cannot be had (loaded once).
const CublasApi& LoadCublas(std::string* problem) {
  static std::string why;
  static const CublasApi api = [] {
    std::string tried;
    CublasApi a;
    void* lib = OpenToolkitLibrary("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), &tried);
    if (lib == nullptr) {
      const char* err = dlerror();
      why = "cannot load cuBLAS (tried " + tried + "): " + (err != nullptr ? err : "");
      return a;
    }
    ResolveSymbol(lib, "cuBLAS", MOE_SYMBOL_NAME(cublasCreate), &a.create, &why);
    ResolveSymbol(lib, "cuBLAS", MOE_SYMBOL_NAME(cublasSetStream), &a.set_stream, &why);
    ResolveSymbol(lib, "cuBLAS", MOE_SYMBOL_NAME(cublasGemmEx), &a.gemm_ex, &why);
    ResolveSymbol(lib, "cuBLAS", MOE_SYMBOL_NAME(cublasGetStatusString), &a.status_string, &why);
    a.grouped_gemm = reinterpret_cast<decltype(a.grouped_gemm)>(
        dlsym(lib, "cublasGemmGroupedBatchedEx"));  // optional
    return a;
  }();
  *problem = why;
  return api;
}
}  // namespace

bool CublasHasGroupedGemm() {
  std::string problem;
  return LoadCublas(&problem).grouped_gemm != nullptr;
}

std::string CheckCublasLoads() {
  std::string problem;
  LoadCublas(&problem);
  return problem;
}

const CublasApi& Cublas() {
  std::string problem;
  const CublasApi& api = LoadCublas(&problem);
  MOE_CHECK(problem.empty()) << problem;
  return api;
}

void* CublasHandle() {
  // One handle per thread (cuBLAS handles are not thread-safe), bound to the device current when
  // the thread first asks; a training process drives one device.
  thread_local cublasHandle_t handle = nullptr;
  if (handle == nullptr)
    MOE_CHECK(Cublas().create(&handle) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
  Cublas().set_stream(handle, Stream());
  return handle;
}

namespace {

thread_local double* g_sum_target = nullptr;
unsigned* g_bad_index = nullptr;  // this process's device (one device per process)

}  // namespace

unsigned* BadIndexFlags() {
  if (g_bad_index == nullptr) {
    MOE_CHECK(cudaMalloc(&g_bad_index, sizeof(unsigned)) == cudaSuccess)
        << "bad-index flags: " << LastError();
    MOE_CHECK(cudaMemsetAsync(g_bad_index, 0, sizeof(unsigned), Stream()) == cudaSuccess)
        << "bad-index flags: " << LastError();
  }
  return g_bad_index;
}

void FoldBadIndices(const Tensor& acc, int64_t slot) {
  CheckOnCuda({&acc}, "FoldBadIndices");
  FoldBadIndicesKernel<<<1, 1, 0, Stream()>>>(BadIndexFlags(),
                                              static_cast<double*>(acc.raw()) + slot);
  CheckLaunch("FoldBadIndices");
}

DeviceSumTarget::DeviceSumTarget(double* dst) : previous_(g_sum_target) { g_sum_target = dst; }
DeviceSumTarget::~DeviceSumTarget() { g_sum_target = previous_; }
double* CurrentDeviceSumTarget() { return g_sum_target; }

namespace {
// Up to this many partials one thread adds them in order (the host's sum, bit for bit); more go
// through the block's tree.
constexpr int64_t kInOrderPartials = 32;

template <typename P>
void AddPartials(const P* partial, int64_t n, double* dst) {
  if (n <= kInOrderPartials)
    AddPartialsKernel<P><<<1, 1, 0, Stream()>>>(partial, n, dst);
  else
    ReducePartialsKernel<P><<<1, kThreads, 0, Stream()>>>(partial, n, dst);
  CheckLaunch("AddPartialsOnDevice");
}
}  // namespace

void AddPartialsOnDevice(const float* partial, int64_t n, double* dst) {
  AddPartials(partial, n, dst);
}
void AddPartialsOnDevice(const double* partial, int64_t n, double* dst) {
  AddPartials(partial, n, dst);
}

double SumPartials(int64_t n, const std::function<void(float*)>& launch) {
  if (n <= 0) return 0;
  RegisterCudaAllocator();
  Tensor partial = Tensor::Empty({n}, DType::kF32, CurrentDevice());
  launch(partial.data<float>());
  if (g_sum_target != nullptr) {  // the caller's DeviceSumTarget: the total stays on the device
    AddPartialsOnDevice(partial.data<float>(), n, g_sum_target);
    return 0;
  }
  std::vector<float> host(static_cast<size_t>(n));
  cudaMemcpyAsync(host.data(), partial.raw(), sizeof(float) * host.size(), cudaMemcpyDeviceToHost,
                  Stream());
  cudaStreamSynchronize(Stream());
  double total = 0;
  for (float v : host) total += v;
  return total;
}

void CheckOnCuda(std::initializer_list<const Tensor*> tensors, const char* op) {
  for (const Tensor* t : tensors) {
    if (t->defined())
      MOE_CHECK(t->device().is_cuda())
          << op << ": a " << t->device().ToString() << " tensor among CUDA ones";
  }
}

DType StorageType(std::initializer_list<const Tensor*> tensors, const char* op) {
  DType d = DType::kF32;
  bool first = true;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    MOE_CHECK(t->dtype() == DType::kF32 || t->dtype() == DType::kBF16)
        << op << ": CUDA kernels take f32 or bf16, got " << DTypeName(t->dtype());
    MOE_CHECK(first || t->dtype() == d)
        << op << ": mixed dtypes " << DTypeName(d) << " and " << DTypeName(t->dtype());
    d = t->dtype();
    first = false;
  }
  return d;
}

void CheckF32(const Tensor& t, const char* op, const char* what) {
  MOE_CHECK(!t.defined() || t.dtype() == DType::kF32)
      << op << ": " << what << " must be f32 on CUDA, got " << DTypeName(t.dtype());
}

void CheckLaunch(const char* op) {
  const std::string e = LastError();
  MOE_CHECK(e.empty()) << op << ": " << e;
}

// ---- Device facts (cuda_ops.h, behind kernels/runtime.h) ----

int CudaDeviceCount(std::string* problem) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();
  // No driver at all (a CPU machine) reads as "insufficient driver" too: tell it apart by loading
  // it.
  bool driver = false;
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    driver = true;
    ::dlclose(lib);
  }
  if (problem != nullptr && e != cudaErrorNoDevice && driver) {
    *problem = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  }
  return 0;
}

std::string CudaDeviceName(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess)
    return "cuda:" + std::to_string(index) + " (" + LastError() + ")";
  return prop.name;
}

int64_t CudaDeviceMemoryBytes(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return 0;
  return static_cast<int64_t>(prop.totalGlobalMem);
}

Status UseCudaDevice(int index) {
  std::string problem;
  const int n = CudaDeviceCount(&problem);
  if (index < 0 || index >= n) {
    return FailedPreconditionError("cuda:" + std::to_string(index) + ": this machine has " +
                                   std::to_string(n) + " usable CUDA device(s)" +
                                   (problem.empty() ? "" : " (" + problem + ")"));
  }
  if (cudaSetDevice(index) != cudaSuccess)
    return UnavailableError("cudaSetDevice(" + std::to_string(index) + "): " + LastError());
  RegisterCudaAllocator();
  return OkStatus();
}

std::string CudaSynchronize() {
  if (cudaDeviceSynchronize() != cudaSuccess) return LastError();
  return "";
}

// ---- Device marks (kernels/runtime.h): timing events on the kernels' stream, kept for reuse ----

namespace {
std::vector<cudaEvent_t>& FreeMarks() {  // the training thread's (one thread times a step)
  thread_local std::vector<cudaEvent_t> free;
  return free;
}
}  // namespace

void* KernelStream() { return Stream(); }

void* RecordDeviceMark() {
  cudaEvent_t e = nullptr;
  if (!FreeMarks().empty()) {
    e = FreeMarks().back();
    FreeMarks().pop_back();
  } else {
    MOE_CHECK(cudaEventCreate(&e) == cudaSuccess) << "device mark: " << LastError();
  }
  MOE_CHECK(cudaEventRecord(e, Stream()) == cudaSuccess) << "device mark: " << LastError();
  return e;
}

double DeviceMarkSeconds(void* from, void* to) {
  float ms = 0;
  const cudaError_t r =
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to));
  MOE_CHECK(r == cudaSuccess) << "device mark read before the device passed it, or failed: "
                              << LastError();
  return static_cast<double>(ms) / 1000.0;
}

void ReleaseDeviceMark(void* mark) {
  if (mark != nullptr) FreeMarks().push_back(static_cast<cudaEvent_t>(mark));
}

void WaitDeviceMark(void* mark) {
  MOE_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(mark)) == cudaSuccess)
      << "waiting for a device mark: " << LastError();
}

}  // namespace moe::kernels::cuda
