#include "kernels/gpu_libraries.h"

namespace moe::kernels {
namespace {

// The header libraries (cuDNN frontend, CUTLASS) and the cuDNN they load, from the Hopper paths
// when this build has them, else why not.
std::vector<GpuLibrary> HeaderLibraries() {
#ifdef MOE_WITH_SM90A
  return cuda::sm90a::HeaderLibraries();
#else
#ifdef MOE_WITH_CUDA
  const std::string why =
      "not built: configure found no cuDNN frontend / CUTLASS headers "
      "(scripts/fetch-gpu-headers.sh)";
#else
  const std::string why = "not built: no CUDA toolkit";
#endif
  return {{"cudnn-frontend", "", why}, {"cutlass", "", why}, {"cudnn", "", why}};
#endif
}

}  // namespace

std::vector<GpuLibrary> GpuLibraries() {
  std::vector<GpuLibrary> all = HeaderLibraries();
#ifdef MOE_WITH_CUDA
  for (GpuLibrary& l : cuda::RuntimeLibraries()) all.push_back(std::move(l));
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
