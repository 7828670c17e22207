#include "worker/engine/model.h"

#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"

namespace moe {

Model::Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, DType dtype, Device device,
             double* alltoall_seconds, std::optional<DType> compute_dtype)
    : cfg_(cfg),
      dtype_(dtype),
      compute_(compute_dtype.value_or(dtype)),
      device_(device),
      params_(dtype, device, compute_) {
  MOE_CHECK(cfg.attention.type == "mha") << "the engine trains multi-head attention; '" << cfg.attention.type
                                         << "' is for FLOPs accounting only";
  const int64_t h = cfg.hidden_size, v = cfg.vocab_size;
  // GPT-2/Megatron initialisation: N(0, init_std), output projections scaled by 1/sqrt(2 * layers).
  const double out_std = cfg.init_std / std::sqrt(2.0 * static_cast<double>(cfg.num_layers));
  dispatcher_ = std::make_unique<TokenDispatcher>(par.expert_parallel > 1 ? par.ep_group : nullptr,
                                                  cfg.moe.num_experts, alltoall_seconds);
  embedding_ = params_.Add("embedding", {v, h}, seed, cfg.init_std);
  blocks_.resize(static_cast<size_t>(cfg.num_layers));
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    Block& b = blocks_[static_cast<size_t>(l)];
    const std::string p = "layers." + std::to_string(l);
    b.attn_norm = std::make_unique<RmsNorm>(params_, p + ".attn_norm", h, cfg.norm_eps, seed);
    b.attn = std::make_unique<Attention>(params_, p + ".attn", cfg, seed, out_std);
    b.ffn_norm = std::make_unique<RmsNorm>(params_, p + ".ffn_norm", h, cfg.norm_eps, seed);
    if (cfg.IsMoeLayer(l)) {
      b.moe = std::make_unique<MoeLayer>(params_, p + ".moe", cfg, seed, out_std, dispatcher_.get(), dtype, device);
      moe_layers_.push_back(b.moe.get());
    } else {
      b.dense = std::make_unique<SwigluFfn>(params_, p + ".ffn", h, cfg.dense_ffn_hidden, seed, cfg.init_std, out_std);
    }
  }
  final_norm_ = std::make_unique<RmsNorm>(params_, "final_norm", h, cfg.norm_eps, seed);
  head_ = params_.Add("head", {v, h}, seed, cfg.init_std);
}

StatusOr<double> Model::Forward(const Tensor& tokens, const Tensor& targets, double ce_scale, double aux_coeff,
                                bool backward, MicroBatchResult* result) {
  const int64_t batch = tokens.dim(0), seq = tokens.dim(1), n = batch * seq;
  MOE_CHECK(targets.shape() == tokens.shape()) << "targets " << targets.ShapeString() << " vs tokens " << tokens.ShapeString();
  const Tensor ids = tokens.Reshape({n});
  const Tensor tgt = targets.Reshape({n});
  result->tokens = n;
  result->tokens_per_expert.clear();
  result->aux_loss = 0;

  Tensor x = Tensor::Empty({n, cfg_.hidden_size}, compute_, device_);
  kernels::EmbeddingForward(embedding_->compute, ids, x);
  for (auto& b : blocks_) {
    Tensor a = b.attn->Forward(b.attn_norm->Forward(x), batch, seq);
    Tensor x1 = Tensor::Empty(x.shape(), compute_, device_);
    kernels::Add(x1, x, a);
    Tensor u = b.ffn_norm->Forward(x1);
    Tensor f;
    if (b.moe) {
      MoeStats stats;
      MOE_ASSIGN_OR_RETURN(f, b.moe->Forward(u, batch, seq, aux_coeff, &stats));
      result->aux_loss += stats.aux_loss;
      result->tokens_per_expert.push_back(std::move(stats.tokens_per_expert));
    } else {
      f = b.dense->Forward(u);
    }
    kernels::Add(f, f, x1);
    x = f;
  }
  Tensor hn = final_norm_->Forward(x);
  // Logits and the loss in the master dtype (fp32 when the activations are bf16); the logits' buffer
  // receives their gradient in place.
  Tensor logits = Linear(hn, head_->compute, dtype_);
  result->ce_sum = kernels::CrossEntropy(logits, tgt, ce_scale, backward ? logits : Tensor());
  const double loss = ce_scale * result->ce_sum + result->aux_loss;
  if (!backward) return loss;

  Tensor dx = final_norm_->Backward(LinearBackward(CastTo(logits, compute_), hn, *head_));
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Block& b = *it;
    Tensor df;
    if (b.moe) {
      MOE_ASSIGN_OR_RETURN(df, b.moe->Backward(dx));
    } else {
      df = b.dense->Backward(dx);
    }
    Tensor dx1 = b.ffn_norm->Backward(df);
    kernels::Add(dx1, dx1, dx);  // residual
    Tensor da = b.attn_norm->Backward(b.attn->Backward(dx1));
    kernels::Add(da, da, dx1);  // residual
    dx = da;
  }
  kernels::EmbeddingBackward(dx, ids, embedding_->grad);
  return loss;
}

StatusOr<MicroBatchResult> Model::ForwardBackward(const Tensor& tokens, const Tensor& targets, double ce_scale,
                                                  double aux_coeff) {
  MicroBatchResult result;
  MOE_RETURN_IF_ERROR(Forward(tokens, targets, ce_scale, aux_coeff, true, &result).status());
  return result;
}

StatusOr<double> Model::Loss(const Tensor& tokens, const Tensor& targets, double ce_scale, double aux_coeff) {
  MicroBatchResult result;
  return Forward(tokens, targets, ce_scale, aux_coeff, false, &result);
}

}  // namespace moe
