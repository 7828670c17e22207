// Device dispatch of the kernel runtime (kernels/runtime.h): the CPU settings from kernels/cpu, the
// CUDA device facts from kernels/cuda, or their answers for a build without CUDA.
#include "kernels/runtime.h"

#include <atomic>

#include "kernels/dispatch.h"

namespace moe::kernels {

namespace {
std::atomic<int64_t> g_host_syncs{0};
}  // namespace

std::string BadIndexMessage(unsigned flags) {
  std::string out;
  const auto add = [&](unsigned bit, const char* what) {
    if ((flags & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(what);
  };
  add(kBadTokenId, "token ids outside the vocabulary");
  add(kBadTarget, "targets outside the vocabulary");
  add(kBadRowIndex, "row indices out of range");
  add(kBadExpert, "expert indices out of range");
  return out.empty() ? "no index out of range" : out;
}

void CountHostSync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }
int64_t HostSyncs() { return g_host_syncs.load(std::memory_order_relaxed); }

void SetNumThreads(int threads) { cpu::SetNumThreads(threads); }
int NumThreads() { return cpu::NumThreads(); }
std::string CpuGemmBackendName(bool fastest) { return cpu::GemmBackendName(fastest); }
void SetReproducibleCpuGemm(bool on) { cpu::SetReproducibleGemm(on); }
bool ReproducibleCpuGemm() { return cpu::ReproducibleGemm(); }

#ifdef MOE_WITH_CUDA

bool HaveCuda() { return true; }
int CudaDeviceCount(std::string* problem) { return cuda::DeviceCount(problem); }
std::string CudaDeviceName(int index) { return cuda::DeviceName(index); }
Status UseCudaDevice(int index) { return cuda::UseDevice(index); }
std::string CudaSynchronize() { return cuda::Synchronize(); }
double MeasureCudaBf16GemmFlops(int64_t size, int reps) { return cuda::MeasureBf16GemmFlops(size, reps); }
std::string CheckCublasLoads() { return cuda::CheckCublasLoads(); }
bool CublasHasGroupedGemm() { return cuda::CublasHasGroupedGemm(); }

#else

namespace {
constexpr const char* kNoCuda = "no CUDA in this build";
}  // namespace

bool HaveCuda() { return false; }
int CudaDeviceCount(std::string*) { return 0; }
std::string CudaDeviceName(int index) { return "cuda:" + std::to_string(index) + " (" + kNoCuda + ")"; }
Status UseCudaDevice(int index) {
  return FailedPreconditionError("cuda:" + std::to_string(index) + ": " + kNoCuda + " (configured without nvcc)");
}
std::string CudaSynchronize() { return kNoCuda; }
double MeasureCudaBf16GemmFlops(int64_t, int) { return 0; }
std::string CheckCublasLoads() { return kNoCuda; }
bool CublasHasGroupedGemm() { return false; }

#endif

}  // namespace moe::kernels
