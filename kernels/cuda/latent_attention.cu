// The latent decoding attention on CUDA (kernels/latent_attention.h): the launch of its kernel
// (latent_attention_kernels.cuh), with the shared-memory bound checked first.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/latent_attention_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {

void LatentAttentionDecode(const Tensor& q, const Tensor& cache, int64_t heads, int64_t dv,
                           double scale, const Tensor& out) {
  const char* op = "LatentAttentionDecode";
  CheckOnCuda({&q, &cache, &out}, op);
  const int64_t n = q.dim(0), total = cache.dim(0), d = cache.dim(1);
  const int64_t smem = (32 + d + total) * static_cast<int64_t>(sizeof(float));
  MOE_CHECK(smem <= kMaxSharedBytes)
      << op << ": " << total << " cached positions of " << d
      << " values need more shared memory than a block has (" << smem << " bytes)";
  MOE_CUDA_TYPED(StorageType({&q, &cache, &out}, op), T, {
    if (n > 0) {
      LatentDecodeKernel<T><<<static_cast<unsigned>(n * heads), kDecodeThreads,
                              static_cast<size_t>(smem), Stream()>>>(
          Ptr<T>(q), Ptr<T>(cache), Ptr<T>(out), n, total, d, heads, dv, static_cast<float>(scale));
    }
  });
  CheckLaunch(op);
}

}  // namespace moe::kernels::cuda
