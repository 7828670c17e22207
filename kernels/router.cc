// Device dispatch of the router family (kernels/router.h): shapes and the routing config, then the
// CPU or CUDA path; and the token count per expert, on the host for either device.
#include "kernels/router.h"

#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/runtime.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(RouterForward)
MOE_KERNEL_BACKENDS(RouterBackward)
MOE_KERNEL_BACKENDS(SeqAuxLoss)

namespace {

void CheckRouter(const Tensor& scores, const Tensor& topk_idx, int64_t k) {
  MOE_CHECK(scores.ndim() == 2 && topk_idx.dtype() == DType::kI32 &&
            topk_idx.dim(0) == scores.dim(0) && topk_idx.dim(1) == k)
      << "router: scores " << scores.ShapeString() << ", topk_idx " << topk_idx.ShapeString()
      << ", k " << k;
}

}  // namespace

void RouterForward(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg,
                   const Tensor& scores, const Tensor& topk_idx, const Tensor& topk_w) {
  const int64_t experts = logits.dim(1);
  CheckRouter(scores, topk_idx, cfg.top_k);
  MOE_CHECK(cfg.top_k >= 1 && cfg.top_k <= experts && experts % cfg.num_groups == 0 &&
            cfg.topk_groups >= 1 && cfg.topk_groups <= cfg.num_groups &&
            cfg.top_k <= cfg.topk_groups * (experts / cfg.num_groups))
      << "RouterForward config: experts " << experts << ", top_k " << cfg.top_k << ", groups "
      << cfg.num_groups << "/" << cfg.topk_groups;
  MOE_CHECK(bias.numel() == experts && scores.shape() == logits.shape() &&
            topk_w.shape() == topk_idx.shape())
      << "RouterForward shapes";
  return MOE_DISPATCH(scores, RouterForward(logits, bias, cfg, scores, topk_idx, topk_w));
}

void RouterBackward(const Tensor& scores, const Tensor& topk_idx, const Tensor& dtopk_w,
                    const Tensor& dscores_extra, const RouterConfig& cfg, const Tensor& dlogits) {
  CheckRouter(scores, topk_idx, cfg.top_k);
  MOE_CHECK(dtopk_w.shape() == topk_idx.shape() && dlogits.shape() == scores.shape() &&
            (!dscores_extra.defined() || dscores_extra.shape() == scores.shape()))
      << "RouterBackward shapes";
  return MOE_DISPATCH(dlogits,
                      RouterBackward(scores, topk_idx, dtopk_w, dscores_extra, cfg, dlogits));
}

namespace {

double CheckedSeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                         double coeff, const Tensor& dscores) {
  const int64_t tokens = scores.dim(0);
  MOE_CHECK(tokens == num_seqs * seq_len && top_k >= 1 && top_k <= scores.dim(1) &&
            (!dscores.defined() || dscores.shape() == scores.shape()))
      << "SeqAuxLoss: scores " << scores.ShapeString() << " for " << num_seqs << " x " << seq_len;
  return MOE_DISPATCH(scores, SeqAuxLoss(scores, top_k, num_seqs, seq_len, coeff, dscores));
}

}  // namespace

double SeqAuxLoss(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                  double coeff, const Tensor& dscores) {
  CountHostSync();
  return CheckedSeqAuxLoss(scores, top_k, num_seqs, seq_len, coeff, dscores);
}

void SeqAuxLossInto(const Tensor& scores, int64_t top_k, int64_t num_seqs, int64_t seq_len,
                    double coeff, const Tensor& dscores, const Tensor& acc, int64_t slot) {
  AddToSlot(acc, slot, scores.device(), "SeqAuxLossInto",
            [&] { return CheckedSeqAuxLoss(scores, top_k, num_seqs, seq_len, coeff, dscores); });
}

// On the host for either device: the indices come back through ToVector.
void CountTokensPerExpert(const Tensor& topk_idx, int64_t num_experts, int64_t* counts) {
  std::vector<int32_t> idx = topk_idx.ToVector<int32_t>();
  std::fill(counts, counts + num_experts, 0);
  for (int32_t e : idx) {
    MOE_CHECK(e >= 0 && e < num_experts) << "expert index " << e << " out of range";
    ++counts[e];
  }
}

}  // namespace moe::kernels
