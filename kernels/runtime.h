// Process-wide kernel runtime settings: the CPU thread count (OpenMP and OpenBLAS share it) and the
// facts a run reports about its kernels.
#pragma once

#include <string>

namespace moe::kernels {

// Sets the threads used by CPU kernels and BLAS. 0 means the hardware concurrency.
void SetNumThreads(int threads);
int NumThreads();
// "openblas 0.3.21 (Haswell, openmp)" or "built-in blocked GEMM".
std::string CpuGemmBackendName();
bool HaveCuda();  // CUDA kernels compiled in

}  // namespace moe::kernels
