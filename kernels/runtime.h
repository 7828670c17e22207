// Process-wide kernel runtime: the CPU thread count (OpenMP and OpenBLAS share it), the facts a run
// reports about its kernels, and the CUDA device facts the engine and the benchmarks need, so that
// nothing outside kernels/ includes kernels/cuda/.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"

namespace moe::kernels {

// Sets the threads used by CPU kernels and BLAS. 0 means the hardware concurrency.
void SetNumThreads(int threads);
int NumThreads();
// "openblas 0.3.21 (Haswell, openmp)" or "built-in blocked GEMM".
// fastest: the one FastestGemm uses (the MFU probe's), whatever SetReproducibleCpuGemm says.
std::string CpuGemmBackendName(bool fastest = false);
bool HaveCuda();  // CUDA kernels compiled in

// "token ids outside the vocabulary, row indices out of range" for the bits set.
std::string BadIndexMessage(unsigned flags);

// CUDA devices. In a build without CUDA kernels there are none: the count is 0 (with no problem),
// UseCudaDevice fails with FAILED_PRECONDITION, the name and CudaSynchronize say "no CUDA in this
// build", the GEMM rate is 0.
//
// GPUs this process can use. 0 when there is none: no device, or no NVIDIA driver at all. When a
// driver is there but CUDA fails (a driver older than the toolkit, a broken device), also 0, and
// `problem` (when given) says why: callers report that instead of skipping quietly.
int CudaDeviceCount(std::string* problem = nullptr);
std::string CudaDeviceName(int index);
// The device's memory in bytes (0 without CUDA or when it cannot be read).
int64_t CudaDeviceMemoryBytes(int index);
// Makes cuda:`index` this process's device and registers its allocator; an error names the device.
Status UseCudaDevice(int index);
// Waits for the current device's queued work (timings, fault checks); returns the CUDA error's
// text, or "" when all went well.
std::string CudaSynchronize();
// The dense bf16 GEMM rate of cuBLAS on the current device, measured now (m = n = k = size, best of
// `reps`), in FLOP/s: the peak MFU is taken against on CUDA.
double MeasureCudaBf16GemmFlops(int64_t size = 8192, int reps = 10);
// Loads cuBLAS the way the first CUDA GEMM does (dlopen; no GPU needed): "" when it and the entry
// points used resolve, else what is missing ("no CUDA in this build" without CUDA).
std::string CheckCublasLoads();
// The stream the CUDA kernels of the current device run on (a cudaStream_t; created on first use),
// for the collectives that order themselves against it. Null without CUDA.
void* KernelStream();
// Marks on the current device's timeline (CUDA events recorded on the kernels' stream), for phase
// times that measure the device rather than the host's queueing (worker/engine/parallel/
// phase_timer.h). DeviceMarkSeconds: from `from` to `to`, once the device has passed both (after a
// host read that waited for the work queued before them); a mark is released once read. Without
// CUDA, RecordDeviceMark returns null and DeviceMarkSeconds 0.
void* RecordDeviceMark();
double DeviceMarkSeconds(void* from, void* to);
void ReleaseDeviceMark(void* mark);
// Waits until the device has passed `mark` (the host's wait for a profile's last mark; not counted
// as a step's host sync: it runs after the step). Without CUDA, returns at once.
void WaitDeviceMark(void* mark);
// Whether that cuBLAS has cublasGemmGroupedBatchedEx (12.5 and later; the grouped GEMMs loop
// without it).
bool CublasHasGroupedGemm();

}  // namespace moe::kernels
