// Cross-entropy fused with softmax: logits [T, V], targets [T]; one block per row; the gradient may
// be written in place over the logits. Row losses are added on the host in a fixed order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

// One block per row: max, sum of exponentials, the loss, and (optionally, in place) the gradient.
template <typename T>
__global__ void CrossEntropyKernel(const T* logits, const int32_t* targets, int64_t vocab,
                                   float scale, T* dlogits, float* losses, unsigned* bad) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, Ld(x[j]));
  mx = BlockMax(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(Ld(x[j]) - mx);
  sum = BlockSum(sum);
  const int32_t target = targets[r];
  const bool ok =
      InRange(target, vocab, bad, kBadTarget);  // a bad target: no read, and a failed step
  const int64_t t = ok ? target : -1;
  const float target_logit = ok ? Ld(x[t]) : 0.f;  // read before the gradient may overwrite it
  __syncthreads();
  if (threadIdx.x == 0) losses[r] = mx + logf(sum) - target_logit;
  if (dlogits != nullptr) {
    const float inv = 1.f / sum;
    T* d = dlogits + r * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      d[j] = Cvt<T>((expf(Ld(x[j]) - mx) * inv - (j == t ? 1.f : 0.f)) * scale);
    }
  }
}

}  // namespace

double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                    const Tensor& dlogits) {
  CheckOnCuda({&logits, &targets, &dlogits}, "CrossEntropy");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  double loss = 0;
  MOE_CUDA_TYPED(StorageType({&logits, &dlogits}, "CrossEntropy"), T, {
    loss = SumPartials(rows, [&](float* losses) {
      CrossEntropyKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, Stream()>>>(
          Ptr<T>(logits), Ptr<int32_t>(targets), vocab, static_cast<float>(grad_scale),
          Ptr<T>(dlogits), losses, BadIndexFlags());
    });
  });
  CheckLaunch("CrossEntropy");
  return loss;
}

}  // namespace moe::kernels::cuda
