// Attention through cuDNN's fused SDPA, built with the cuDNN frontend's graph API (header-only C++,
// cmake/MoeGpuLibraries.cmake: MOE_WITH_SM90A). cuDNN itself is loaded at run time (dlopen, as
// cuBLAS is), so a machine without it runs everything but this path and says so. Host-side API, no
// cuDNN types: callers include this without the frontend's headers.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/fused_attention.h"

namespace moe::kernels::cuda::sm90a {

// The cuDNN frontend version this build was compiled with ("1.32.0").
std::string CudnnFrontendVersion();

// cuDNN's runtime library (libcudnn.so.<major>), loaded once: beside libcudart, in
// $MOE_CUDA_LIB_DIRS, or on the library path. found: its version ("9.13.0") and the file; else
// `why` says where it looked.
struct CudnnRuntime {
  bool found = false;
  std::string version, where, why;
};
const CudnnRuntime& LoadCudnn();

// SdpaShape, SdpaBuffers, SdpaForward and SdpaBackward: kernels/fused_attention.h.

// Builds cuDNN's SDPA forward (with the statistics backward needs) and backward graphs for `s` and
// validates them with the frontend for Hopper (sm_90; host checks of shapes, strides, types and
// what the architecture supports: no GPU needed).
// "" when both validate, else what the frontend said, naming the graph.
std::string ValidateSdpaGraphs(const SdpaShape& s);

// On a GPU: the graphs of ValidateSdpaGraphs lowered to cuDNN's backend, its heuristics' plans
// checked for support and built on the current device. "" when cuDNN can run both, else why not
// (no cuDNN, no device, the shape refused).
std::string BuildSdpaPlans(const SdpaShape& s);

}  // namespace moe::kernels::cuda::sm90a
