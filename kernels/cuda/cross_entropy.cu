// Cross-entropy fused with softmax: logits [T, V], targets [T]; one block per row; the gradient may
// be written in place over the logits, or as bf16 from fp32 logits. Row losses are summed in a
// fixed order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                    const Tensor& dlogits) {
  CheckOnCuda({&logits, &targets, &dlogits}, "CrossEntropy");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const DType lt = StorageType({&logits}, "CrossEntropy"),
              gt = dlogits.defined() ? StorageType({&dlogits}, "CrossEntropy") : lt;
  double loss = 0;
  MOE_CUDA_TYPED(lt, T, {
    MOE_CUDA_TYPED(gt, G, {
      if constexpr (sizeof(G) <= sizeof(T)) {  // kernels/cross_entropy.cc checked the pair
        loss = SumPartials(rows, [&](float* losses) {
          CrossEntropyKernel<T, G><<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(
              Ptr<T>(logits), Ptr<int32_t>(targets), vocab, static_cast<float>(grad_scale),
              Ptr<G>(dlogits), losses, BadIndexFlags());
        });
      }
    });
  });
  CheckLaunch("CrossEntropy");
  return loss;
}

}  // namespace moe::kernels::cuda
