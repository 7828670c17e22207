#include "worker/engine/model.h"

#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "worker/engine/mtp.h"

namespace moe {

Model::Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, DType dtype, Device device,
             double* alltoall_seconds, std::optional<DType> compute_dtype)
    : Model(cfg, par, seed,
            ModelOptions{.dtype = dtype, .device = device, .compute = compute_dtype, .moments = std::nullopt,
                         .max_seq_len = 0, .recompute = {}, .alltoall_seconds = alltoall_seconds}) {}

Model::Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, const ModelOptions& o)
    : cfg_(cfg),
      dtype_(o.dtype),
      compute_(o.compute.value_or(o.dtype)),
      device_(o.device),
      params_(o.dtype, o.device, compute_, o.moments) {
  const int64_t h = cfg.hidden_size, v = cfg.vocab_size;
  // Megatron's initialisation: N(0, init_std), output projections scaled by 1/sqrt(2 * layers).
  const double out_std = cfg.init_std / std::sqrt(2.0 * static_cast<double>(cfg.num_layers));
  dispatcher_ = std::make_unique<TokenDispatcher>(par.expert_parallel > 1 ? par.ep_group : nullptr, cfg.moe.num_experts,
                                                  o.alltoall_seconds);
  const AttentionContext ctx{.max_seq_len = o.max_seq_len, .dtype = dtype_, .device = device_, .recompute = o.recompute};
  embedding_ = params_.Add("embedding", {v, h}, seed, cfg.init_std);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    blocks_.push_back(std::make_unique<TransformerBlock>(params_, "layers." + std::to_string(l), cfg, cfg.IsMoeLayer(l),
                                                         seed, out_std, dispatcher_.get(), dtype_, ctx));
    if (blocks_.back()->moe() != nullptr) moe_layers_.push_back(blocks_.back()->moe());
  }
  final_norm_ = std::make_unique<RmsNorm>(params_, "final_norm", h, cfg.norm_eps, seed);
  head_ = params_.Add("head", {v, h}, seed, cfg.init_std);
  if (!cfg.MtpTrains()) return;
  for (int k = 1; k <= cfg.mtp_depth; ++k) {
    mtp_.push_back(std::make_unique<MtpDepth>(params_, "mtp." + std::to_string(k - 1), cfg, k, seed, out_std,
                                              dispatcher_.get(), dtype_, ctx));
    if (mtp_.back()->moe() != nullptr) moe_layers_.push_back(mtp_.back()->moe());
  }
}

Model::~Model() = default;

StatusOr<Tensor> Model::ForwardBlocks(const Tensor& ids, int64_t batch, int64_t seq, double aux_coeff,
                                      MicroBatchResult* r) {
  Tensor x = Tensor::Empty({ids.numel(), cfg_.hidden_size}, compute_, device_);
  kernels::EmbeddingForward(embedding_->compute, ids, x);
  for (auto& b : blocks_) {
    MoeStats stats;
    MOE_ASSIGN_OR_RETURN(x, b->Forward(x, batch, seq, aux_coeff, &stats));
    if (b->moe() == nullptr) continue;
    r->aux_loss += stats.aux_loss;
    r->tokens_per_expert.push_back(std::move(stats.tokens_per_expert));
    r->routing.push_back(stats.routing);
  }
  return x;
}

StatusOr<Tensor> Model::BackwardBlocks(Tensor dx, const Tensor& ids) {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    MOE_ASSIGN_OR_RETURN(dx, (*it)->Backward(dx));
  }
  kernels::EmbeddingBackward(dx, ids, embedding_->grad);
  return dx;
}

StatusOr<double> Model::Forward(const Tensor& tokens, const Tensor& targets, const LossScales& scales, bool backward,
                                MicroBatchResult* result) {
  const int64_t batch = tokens.dim(0), seq = tokens.dim(1), n = batch * seq;
  MOE_CHECK(targets.shape() == tokens.shape()) << "targets " << targets.ShapeString() << " vs tokens " << tokens.ShapeString();
  MOE_CHECK(scales.mtp.size() >= mtp_.size()) << "loss scales for " << scales.mtp.size() << " MTP depths, the model trains "
                                              << mtp_.size();
  *result = MicroBatchResult();
  result->tokens = n;
  Saved s;
  s.ids = tokens.Reshape({n});
  const Tensor tgt = targets.Reshape({n});
  MOE_ASSIGN_OR_RETURN(Tensor h0, ForwardBlocks(s.ids, batch, seq, scales.aux_coeff, result));
  s.hn = final_norm_->Forward(h0);
  // Logits and the loss in the master dtype (fp32 when the activations are bf16); the logits' buffer
  // receives their gradient in place.
  s.logits = Linear(s.hn, head_->compute, dtype_);
  if (!backward) last_logits_ = s.logits;
  result->ce_sum = kernels::CrossEntropy(s.logits, tgt, scales.ce, backward ? s.logits : Tensor());
  double loss = scales.ce * result->ce_sum;
  MtpDepth::Inputs in{h0, seq, s.ids, tgt, batch, seq};
  for (size_t k = 0; k < mtp_.size(); ++k) {
    double ce = 0;
    MoeStats stats;
    MOE_ASSIGN_OR_RETURN(Tensor hk, mtp_[k]->Forward(in, *embedding_, *head_, dtype_, scales.mtp[k], scales.aux_coeff,
                                                     backward, &ce, &stats));
    result->mtp_ce_sums.push_back(ce);
    loss += scales.mtp[k] * ce;
    if (mtp_[k]->moe() != nullptr) {
      result->aux_loss += stats.aux_loss;
      result->tokens_per_expert.push_back(std::move(stats.tokens_per_expert));
      result->routing.push_back(stats.routing);
    }
    in.h_prev = hk;
    in.prev_len = seq - static_cast<int64_t>(k) - 1;
  }
  loss += result->aux_loss;
  if (!backward) return loss;
  saved_.Push(std::move(s));
  MOE_RETURN_IF_ERROR(Backward());
  return loss;
}

// MTP depths last to first (each hands the gradient on its input hidden state to the one before), then
// the main head and the blocks.
Status Model::Backward() {
  const Saved s = saved_.Pop();
  Tensor dh_next;
  for (auto it = mtp_.rbegin(); it != mtp_.rend(); ++it) {
    MOE_ASSIGN_OR_RETURN(dh_next, (*it)->Backward(dh_next, *embedding_, *head_));
  }
  Tensor dx = final_norm_->Backward(LinearBackward(CastTo(s.logits, compute_), s.hn, *head_));
  if (dh_next.defined()) kernels::Add(dx, dx, dh_next);
  return BackwardBlocks(dx, s.ids).status();
}

StatusOr<MicroBatchResult> Model::ForwardBackward(const Tensor& tokens, const Tensor& targets, const LossScales& scales) {
  MicroBatchResult result;
  MOE_RETURN_IF_ERROR(Forward(tokens, targets, scales, true, &result).status());
  return result;
}

StatusOr<double> Model::Loss(const Tensor& tokens, const Tensor& targets, const LossScales& scales,
                             MicroBatchResult* result) {
  MicroBatchResult local;
  NoGradScope forward_only;  // the layers keep nothing for a backward
  return Forward(tokens, targets, scales, false, result != nullptr ? result : &local);
}

}  // namespace moe
