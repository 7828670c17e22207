// The CUDA backend's part of kernels/gpu_libraries.h: cuBLAS and the CUDA runtime. Host C++; no
// GPU needed.
#include "kernels/gpu_libraries.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "kernels/cuda/cublas_api.h"

namespace moe::kernels::cuda {
namespace {

std::string Dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// cuBLAS as the first GEMM loads it; its version from cublasGetProperty (no handle, no GPU).
GpuLibrary CublasLibrary() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  void* lib = OpenToolkitLibrary(name, &tried);
  if (lib == nullptr) return {"cublas", "", "runtime: absent (tried " + tried + ")"};
  using GetProperty = cublasStatus_t (*)(libraryPropertyType, int*);
  auto get = reinterpret_cast<GetProperty>(dlsym(lib, "cublasGetProperty"));
  int v[3] = {0, 0, 0};
  const libraryPropertyType parts[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
  for (int i = 0; i < 3 && get != nullptr; ++i) get(parts[i], &v[i]);
  Dl_info info{};
  const bool named = get != nullptr && dladdr(reinterpret_cast<void*>(get), &info) != 0 &&
                     info.dli_fname != nullptr;
  return {"cublas", Dotted(v[0], v[1], v[2]), "runtime: found " + (named ? info.dli_fname : name)};
}

// "13.0" from CUDA's 13000.
std::string CudaVersion(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

GpuLibrary CudaRuntime() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const bool have_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  return {"cuda-runtime", CudaVersion(runtime),
          "driver: " + (have_driver ? CudaVersion(driver) : std::string("none"))};
}

}  // namespace

std::vector<GpuLibrary> RuntimeLibraries() { return {CublasLibrary(), CudaRuntime()}; }

}  // namespace moe::kernels::cuda
