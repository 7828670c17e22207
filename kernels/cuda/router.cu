// DeepSeek-V3 routing in fp32 (kernels/router.h): scores, biased group-limited top-k and weights,
// one warp per token (at most 512 experts and 64 groups); its backward; the sequence-wise balance
// loss over (token) and (sequence, chunk of tokens) grids, deterministic. f32 only: the router GEMM
// writes fp32 logits, as DeepSeek-V3 routes in fp32.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/router_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg,
                   const Tensor& scores, const Tensor& topk_idx, const Tensor& topk_w) {
  CheckOnCuda({&logits, &bias, &scores, &topk_idx, &topk_w}, "RouterForward");
  for (const Tensor* t : {&logits, &bias, &scores, &topk_w})
    CheckF32(*t, "RouterForward", "every routing tensor");
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  MOE_CHECK(experts <= kMaxExperts && cfg.num_groups <= kMaxGroups)
      << "RouterForward on CUDA: at most " << kMaxExperts << " experts and " << kMaxGroups
      << " groups, got " << experts << " and " << cfg.num_groups;
  if (tokens > 0) {
    const unsigned blocks = static_cast<unsigned>((tokens + kRouteWarps - 1) / kRouteWarps);
    RouteWarpKernel<<<blocks, 32 * kRouteWarps, 0, Stream()>>>(
        Ptr<float>(logits), Ptr<float>(bias), tokens, experts, cfg.top_k, cfg.num_groups,
        cfg.topk_groups, cfg.sigmoid, static_cast<float>(cfg.route_scale), cfg.use_bias,
        Ptr<float>(scores), Ptr<int32_t>(topk_idx), Ptr<float>(topk_w));
  }
  CheckLaunch("RouterForward");
}

void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w,
                    const Tensor& dscores_extra, const RouterConfig& cfg, const Tensor& dlogits) {
  CheckOnCuda({&scores, &topk_idx, &dtopk_w, &dscores_extra, &dlogits}, "RouterBackward");
  for (const Tensor* t : {&scores, &dtopk_w, &dscores_extra, &dlogits})
    CheckF32(*t, "RouterBackward", "every routing tensor");
  const int64_t tokens = scores.dim(0), experts = scores.dim(1);
  MOE_CHECK(experts <= kMaxExperts)
      << "RouterBackward on CUDA: at most " << kMaxExperts << " experts, got " << experts;
  if (tokens > 0) {
    const unsigned blocks = static_cast<unsigned>((tokens + kRouteWarps - 1) / kRouteWarps);
    RouteBackwardWarpKernel<<<blocks, 32 * kRouteWarps, 0, Stream()>>>(
        Ptr<float>(scores), Ptr<int32_t>(topk_idx), Ptr<float>(dtopk_w), Ptr<float>(dscores_extra),
        tokens, experts, cfg.top_k, cfg.sigmoid, static_cast<float>(cfg.route_scale),
        Ptr<float>(dlogits));
  }
  CheckLaunch("RouterBackward");
}

double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                  double coeff, const Tensor& dscores) {
  CheckOnCuda({&scores, &dscores}, "SeqAuxLoss");
  CheckF32(scores, "SeqAuxLoss", "scores");
  CheckF32(dscores, "SeqAuxLoss", "dscores");
  const int64_t experts = scores.dim(1);
  MOE_CHECK(experts <= kMaxExperts)
      << "SeqAuxLoss on CUDA: at most " << kMaxExperts << " experts, got " << experts;
  if (num_seqs * seq_len == 0) return 0;
  RegisterCudaAllocator();
  const Device dev = scores.device();
  const int64_t tokens = num_seqs * seq_len;
  Tensor sums = Tensor::Empty({tokens}, DType::kF32, dev);
  Tensor partial = Tensor::Empty({num_seqs * SeqAuxChunks(seq_len) * experts}, DType::kF32, dev);
  Tensor f = Tensor::Empty({num_seqs * experts}, DType::kF32, dev);
  Tensor counts = Tensor::Zeros({num_seqs * experts}, DType::kI32, dev);
  const double loss = SumPartials(num_seqs, [&](float* losses) {
    const SeqAuxBuffers b{Ptr<float>(sums), Ptr<float>(partial), Ptr<float>(f),
                          losses,           Ptr<float>(dscores), Ptr<int>(counts)};
    SeqAuxSteps(Ptr<float>(scores), num_seqs, seq_len, experts, top_k, static_cast<float>(coeff), b,
                [](auto kernel, dim3 grid, dim3 block, auto... args) {
                  kernel<<<grid, block, 0, Stream()>>>(args...);
                });
  });
  CheckLaunch("SeqAuxLoss");
  return loss;
}

}  // namespace moe::kernels::cuda
