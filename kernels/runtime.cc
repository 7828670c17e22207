// Device dispatch of the kernel runtime (kernels/runtime.h): the CPU settings from kernels/cpu, the
// CUDA device facts from kernels/cuda, or their answers for a build without CUDA.
#include "kernels/runtime.h"

#include <algorithm>
#include <chrono>

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_CPU_KERNEL(SetNumThreads)
MOE_CPU_KERNEL(NumThreads)
MOE_CPU_KERNEL(CpuGemmBackendName)
MOE_CUDA_KERNEL(CudaDeviceCount)
MOE_CUDA_KERNEL(CudaDeviceName)
MOE_CUDA_KERNEL(CudaDeviceMemoryBytes)
MOE_CUDA_KERNEL(UseCudaDevice)
MOE_CUDA_KERNEL(CudaSynchronize)
MOE_CUDA_KERNEL(CheckCublasLoads)
MOE_CUDA_KERNEL(CublasHasGroupedGemm)
MOE_CUDA_KERNEL(KernelStream)
MOE_CUDA_KERNEL(RecordDeviceMark)
MOE_CUDA_KERNEL(DeviceMarkSeconds)
MOE_CUDA_KERNEL(WaitDeviceMark)
MOE_CUDA_KERNEL(ReleaseDeviceMark)

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

void SetNumThreads(int threads) { cpu::SetNumThreads(threads); }
int NumThreads() { return cpu::NumThreads(); }
std::string CpuGemmBackendName(bool fastest) { return cpu::CpuGemmBackendName(fastest); }

#ifdef MOE_WITH_CUDA

// cuBLAS's bf16 rate through the public GEMM, on random operands (matrix units run faster on
// constant data than on random data); the warm-up lets cuBLAS pick its kernel.
double MeasureCudaBf16GemmFlops(int64_t size, int reps) {
  cuda::RegisterCudaAllocator();
  const Device dev = cuda::CurrentDevice();
  Tensor a = Tensor::Empty({size, size}, DType::kBF16, dev),
         b = Tensor::Empty({size, size}, DType::kBF16, dev);
  Tensor c = Tensor::Empty({size, size}, DType::kBF16, dev);
  FillUniform(a, 1);
  FillUniform(b, 2);
  Gemm(a, false, b, true, c, 1.0, 0.0);
  CudaSynchronize();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Gemm(a, false, b, true, c, 1.0, 0.0);
    CudaSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(size) * static_cast<double>(size) *
                              static_cast<double>(size) / s);
  }
  return best;
}

bool HaveCuda() { return true; }
int CudaDeviceCount(std::string* problem) { return cuda::CudaDeviceCount(problem); }
std::string CudaDeviceName(int index) { return cuda::CudaDeviceName(index); }
int64_t CudaDeviceMemoryBytes(int index) { return cuda::CudaDeviceMemoryBytes(index); }
Status UseCudaDevice(int index) { return cuda::UseCudaDevice(index); }
std::string CudaSynchronize() { return cuda::CudaSynchronize(); }
std::string CheckCublasLoads() { return cuda::CheckCublasLoads(); }
bool CublasHasGroupedGemm() { return cuda::CublasHasGroupedGemm(); }
void* KernelStream() { return cuda::KernelStream(); }
void* RecordDeviceMark() { return cuda::RecordDeviceMark(); }
double DeviceMarkSeconds(void* from, void* to) { return cuda::DeviceMarkSeconds(from, to); }
void ReleaseDeviceMark(void* mark) { cuda::ReleaseDeviceMark(mark); }
void WaitDeviceMark(void* mark) { cuda::WaitDeviceMark(mark); }

#else

namespace {
constexpr const char* kNoCuda = "no CUDA in this build";
}  // namespace

bool HaveCuda() { return false; }
int CudaDeviceCount(std::string*) { return 0; }
std::string CudaDeviceName(int index) {
  return "cuda:" + std::to_string(index) + " (" + kNoCuda + ")";
}
int64_t CudaDeviceMemoryBytes(int) { return 0; }
Status UseCudaDevice(int index) {
  return FailedPreconditionError("cuda:" + std::to_string(index) + ": " + kNoCuda +
                                 " (configured without nvcc)");
}
std::string CudaSynchronize() { return kNoCuda; }
double MeasureCudaBf16GemmFlops(int64_t, int) { return 0; }
std::string CheckCublasLoads() { return kNoCuda; }
bool CublasHasGroupedGemm() { return false; }
void* KernelStream() { return nullptr; }
void* RecordDeviceMark() { return nullptr; }
double DeviceMarkSeconds(void*, void*) { return 0; }
void ReleaseDeviceMark(void*) {}
void WaitDeviceMark(void*) {}

#endif

}  // namespace moe::kernels
