#include "kernels/runtime.h"

#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef MOE_HAVE_CBLAS
#include <cblas.h>
#endif

namespace moe::kernels {

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

std::string CpuGemmBackendName() {
#ifdef MOE_HAVE_CBLAS
  std::string config = openblas_get_config();
  return "OpenBLAS (" + config + ", kernel " + openblas_get_corename() + ")";
#else
  return "built-in blocked GEMM (no BLAS linked)";
#endif
}

bool HaveCuda() {
#ifdef MOE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace moe::kernels
