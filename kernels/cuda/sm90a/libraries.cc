// The Hopper paths' part of kernels/gpu_libraries.h: the header
// libraries this build compiled in, with the folders configure found them in, and the cuDNN library
// the frontend loads at run time.
#include <string>
#include <vector>

#include "kernels/cuda/sm90a/cudnn_attention.h"
#include "kernels/cuda/sm90a/grouped_gemm.h"
#include "kernels/gpu_libraries.h"

namespace moe::kernels::cuda::sm90a {

std::vector<GpuLibrary> HeaderLibraries() {
  const auto& cudnn = LoadCudnn();
  return {
      {"cudnn-frontend", CudnnFrontendVersion(), std::string("headers, ") + MOE_CUDNN_FRONTEND_DIR},
      {"cutlass", CutlassVersion(), std::string("headers, ") + MOE_CUTLASS_DIR},
      {"cudnn", cudnn.version,
       cudnn.found ? "runtime: found " + cudnn.where : "runtime: absent (" + cudnn.why + ")"}};
}

}  // namespace moe::kernels::cuda::sm90a
