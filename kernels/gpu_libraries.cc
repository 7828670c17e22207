#include "kernels/gpu_libraries.h"

#ifdef MOE_WITH_CUDA
#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include "kernels/cuda/cublas_api.h"
#endif
#ifdef MOE_WITH_SM90A
#include "kernels/cuda/sm90a/cudnn_attention.h"
#include "kernels/cuda/sm90a/grouped_gemm.h"
#endif

namespace moe::kernels {
namespace {

#ifdef MOE_WITH_CUDA
std::string Dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// cuBLAS as the first GEMM loads it; its version from cublasGetProperty (no handle, no GPU).
GpuLibrary Cublas() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string tried;
  void* lib = cuda::OpenToolkitLibrary(name, &tried);
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
#endif

#ifdef MOE_WITH_SM90A
std::vector<GpuLibrary> HeaderLibraries() {
  const auto& cudnn = cuda::sm90a::LoadCudnn();
  return {{"cudnn-frontend", cuda::sm90a::CudnnFrontendVersion(),
           std::string("headers, ") + MOE_CUDNN_FRONTEND_DIR},
          {"cutlass", cuda::sm90a::CutlassVersion(), std::string("headers, ") + MOE_CUTLASS_DIR},
          {"cudnn", cudnn.version,
           cudnn.found ? "runtime: found " + cudnn.where : "runtime: absent (" + cudnn.why + ")"}};
}
#else
std::vector<GpuLibrary> HeaderLibraries() {
#ifdef MOE_WITH_CUDA
  const std::string why =
      "not built: configure found no cuDNN frontend / CUTLASS headers "
      "(scripts/fetch-gpu-headers.sh)";
#else
  const std::string why = "not built: no CUDA toolkit";
#endif
  return {{"cudnn-frontend", "", why}, {"cutlass", "", why}, {"cudnn", "", why}};
}
#endif

}  // namespace

std::vector<GpuLibrary> GpuLibraries() {
  std::vector<GpuLibrary> all = HeaderLibraries();
#ifdef MOE_WITH_CUDA
  all.push_back(Cublas());
  all.push_back(CudaRuntime());
#else
  all.push_back({"cublas", "", "not built: no CUDA toolkit"});
  all.push_back({"cuda-runtime", "", "not built: no CUDA toolkit"});
#endif
  return all;
}

std::string FormatGpuLibraries(const std::vector<GpuLibrary>& libraries) {
  std::string out;
  for (const auto& l : libraries)
    out += l.name + " " + (l.version.empty() ? "-" : l.version) + " (" + l.origin + ")\n";
  return out;
}

}  // namespace moe::kernels
