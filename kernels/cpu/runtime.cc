// The CPU kernels' runtime: the thread count OpenMP and OpenBLAS share, and which GEMM runs.
#include <algorithm>
#include <atomic>
#include <thread>

#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MOE_HAVE_CBLAS
#include <cblas.h>
#endif

namespace moe::kernels::cpu {

namespace {
int g_threads = 0;
}

void SetNumThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  g_threads = threads;
#ifdef _OPENMP
  omp_set_num_threads(threads);
  omp_set_dynamic(0);
#endif
#ifdef MOE_HAVE_CBLAS
  openblas_set_num_threads(threads);
#endif
}

int NumThreads() {
  if (g_threads == 0) SetNumThreads(0);
  return g_threads;
}

std::string CpuGemmBackendName(bool fastest) {
  if (ReproducibleCpuGemm() && !fastest)
    return "built-in blocked GEMM (reproducible: training.deterministic)";
#ifdef MOE_HAVE_CBLAS
  std::string config = openblas_get_config();
  return "OpenBLAS (" + config + ", kernel " + openblas_get_corename() + ")";
#else
  return "built-in blocked GEMM (no BLAS linked)";
#endif
}

}  // namespace moe::kernels::cpu
