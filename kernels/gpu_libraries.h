// What this build's GPU paths run on: the header libraries compiled in (the cuDNN frontend,
// CUTLASS) with their versions and where their headers came from, and the libraries loaded at run
// time (cuDNN, cuBLAS) with whether this machine has them. moe-train --version prints it; a machine
// without cuDNN runs everything but the cuDNN path, and this says so.
#pragma once

#include <string>
#include <vector>

namespace moe::kernels {

struct GpuLibrary {
  std::string name;     // cudnn-frontend | cutlass | cudnn | cublas | cuda-runtime
  std::string version;  // "1.32.0"; "" when not built in or not found
  std::string origin;  // "headers, <dir>" | "runtime: found <file>" | "runtime: absent (why)" | ...
};

// One entry per library, in the order above. Loads cuDNN and cuBLAS (dlopen; no GPU needed) to ask
// their versions.
std::vector<GpuLibrary> GpuLibraries();

// "name version (origin)", one line each.
std::string FormatGpuLibraries(const std::vector<GpuLibrary>& libraries);

// Defined by the backends (declared here so that no include points from this layer down into their
// folders): kernels/cuda/gpu_libraries.cc, in CUDA builds, cuBLAS as the first GEMM loads it and
// the CUDA runtime with the driver it found; kernels/cuda/sm90a/libraries.cc, in builds with the
// Hopper paths, the cuDNN frontend and CUTLASS (versions and the header folders this build used)
// and the cuDNN library the frontend loads at run time.
namespace cuda {
std::vector<GpuLibrary> RuntimeLibraries();
}  // namespace cuda
namespace cuda::sm90a {
std::vector<GpuLibrary> HeaderLibraries();
}  // namespace cuda::sm90a

}  // namespace moe::kernels
