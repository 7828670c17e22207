// AdamW on fp32 master weights, fused elementwise: decoupled weight decay, bias-corrected moments
// (the step is 1-based), the gradient scaled first (global-norm clipping). The moments are fp32, or
// bf16 (DeepSeek-V3's): read into fp32, updated and used in fp32, rounded to nearest even when
// stored.
#include <cmath>

#include "kernels/adamw_types.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optimizer_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

template <typename M, typename C>
void LaunchMulti(const AdamWPlan& plan, const AdamWBuffers& b, const AdamWArgs& a) {
  const int64_t chunks = plan.chunks.numel() / 2;
  AdamWMultiKernel<M, C><<<static_cast<unsigned>(chunks), kThreads, 0, Stream()>>>(
      Ptr<int64_t>(plan.chunks), Ptr<float>(b.master), b.master_offset, Ptr<float>(b.grad),
      Ptr<M>(b.m), Ptr<M>(b.v), b.moments_offset, Ptr<C>(b.compute), a);
}

}  // namespace

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg) {
  CheckOnCuda({&param, &grad, &m, &v}, "AdamW");
  for (const Tensor* t : {&param, &grad}) CheckF32(*t, "AdamW", "master weights and gradients");
  const DType moments = StorageType({&m, &v}, "AdamW (moments)");
  const int64_t n = param.numel();
  MOE_CUDA_TYPED(moments, M, {
    if (n > 0) {
      AdamWKernel<M><<<Blocks(n), kThreads, 0, Stream()>>>(
          Ptr<float>(param), Ptr<float>(grad), Ptr<M>(m), Ptr<M>(v), n, AdamWArgsFor(cfg));
    }
  });
  CheckLaunch("AdamW");
}

void AdamWMulti(const AdamWPlan& plan, const AdamWBuffers& b, const AdamWConfig& cfg) {
  CheckOnCuda({&b.master, &b.grad, &b.m, &b.v, &b.compute, &plan.chunks}, "AdamWMulti");
  for (const Tensor* t : {&b.master, &b.grad})
    CheckF32(*t, "AdamWMulti", "master weights and gradients");
  MOE_CHECK(plan.segments.empty() ||
            (plan.chunks.defined() && plan.chunks.device() == b.master.device()))
      << "AdamWMulti: the plan was made for another device (MakeAdamWPlan)";
  if (plan.segments.empty()) return;
  const DType moments = StorageType({&b.m, &b.v}, "AdamWMulti (moments)");
  const AdamWArgs a = AdamWArgsFor(cfg);
  MOE_CUDA_TYPED(moments, M, {
    if (!b.compute.defined() || b.compute.dtype() == DType::kF32)
      LaunchMulti<M, float>(plan, b, a);
    else
      LaunchMulti<M, bf16>(plan, b, a);
  });
  CheckLaunch("AdamWMulti");
}

}  // namespace moe::kernels::cuda
