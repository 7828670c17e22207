// Embedding lookup and its gradient: out[t] = table[ids[t]]; the backward scatter-adds into an fp32
// table gradient with atomics (not bitwise reproducible, unlike the CPU's counting sort).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out) {
  CheckOnCuda({&table, &ids, &out}, "EmbeddingForward");
  const int64_t tokens = out.dim(0), d = out.dim(1);
  MOE_CUDA_TYPED(StorageType({&table, &out}, "EmbeddingForward"), T, {
    if (tokens * d > 0) {
      EmbeddingForwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(
          Ptr<T>(table), Ptr<int32_t>(ids), Ptr<T>(out), tokens, d, table.dim(0), BadIndexFlags());
    }
  });
  CheckLaunch("EmbeddingForward");
}

void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  CheckOnCuda({&dout, &ids, &dtable}, "EmbeddingBackward");
  CheckF32(dtable, "EmbeddingBackward", "dtable (a parameter gradient)");
  const int64_t tokens = dout.dim(0), d = dout.dim(1);
  MOE_CUDA_TYPED(StorageType({&dout}, "EmbeddingBackward"), T, {
    if (tokens * d > 0) {
      EmbeddingBackwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(
          Ptr<T>(dout), Ptr<int32_t>(ids), Ptr<float>(dtable), tokens, d, dtable.dim(0),
          BadIndexFlags());
    }
  });
  CheckLaunch("EmbeddingBackward");
}

}  // namespace moe::kernels::cuda
