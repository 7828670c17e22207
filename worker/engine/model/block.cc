#include "worker/engine/model/block.h"

#include "kernels/elementwise.h"
#include "worker/engine/parallel/step_profile.h"

namespace moe::model {

// --- TransformerBlock
// ------------------------------------------------------------------------------

TransformerBlock::TransformerBlock(ParamSet& params, const std::string& prefix,
                                   const ModelConfig& cfg, bool moe, uint64_t seed, double out_std,
                                   parallel::TokenDispatcher* dispatcher, DType routing_dtype,
                                   const AttentionContext& ctx)
    : full_recompute_(ctx.recompute.full) {
  const int64_t h = cfg.hidden_size;
  attn_norm_ = std::make_unique<RmsNorm>(params, prefix + ".attn_norm", h, cfg.norm_eps, seed);
  attn_ = MakeAttention(params, prefix + ".attn", cfg, seed, out_std, ctx);
  ffn_norm_ = std::make_unique<RmsNorm>(params, prefix + ".ffn_norm", h, cfg.norm_eps, seed);
  if (moe) {
    moe_ = std::make_unique<MoeLayer>(params, prefix + ".moe", cfg, seed, out_std, dispatcher,
                                      routing_dtype, ctx.device, ctx.recompute.moe_act);
  } else {
    dense_ = std::make_unique<SwigluFfn>(params, prefix + ".ffn", h, cfg.dense_ffn_hidden, seed,
                                         cfg.init_std, out_std, ctx.recompute.mlp);
  }
}

// Under full recompute the sublayers keep nothing in the forward: the block keeps its input and
// runs its forward again (keeping everything) right before its backward.
StatusOr<Tensor> TransformerBlock::Forward(const Tensor& x, int64_t batch, int64_t seq_len,
                                           double aux_coeff, MoeStats* stats) {
  if (!full_recompute_ || !GradEnabled()) return Compute(x, batch, seq_len, aux_coeff, stats);
  saved_.Push({x, batch, seq_len, aux_coeff});
  stats->recompute_follows = true;
  NoGradScope keep_nothing;
  return Compute(x, batch, seq_len, aux_coeff, stats);
}

StatusOr<Tensor> TransformerBlock::Compute(const Tensor& x, int64_t batch, int64_t seq_len,
                                           double aux_coeff, MoeStats* stats) {
  parallel::ProfilePhase phase("norms, residuals fwd");
  const Tensor u = attn_norm_->Forward(x);
  Tensor a;
  {
    parallel::ProfilePhase attn("attention projections fwd");  // the core: "attention fwd"
    a = attn_->Forward(u, batch, seq_len);
  }
  Tensor x1;
  const Tensor u1 = ffn_norm_->AddForward(x, a, &x1);  // x1 = x + a, normed in the same pass
  return FeedForward(x1, u1, batch, seq_len, aux_coeff, stats);
}

StatusOr<Tensor> TransformerBlock::Decode(const Tensor& x, LayerKvCache& cache) {
  MOE_CHECK(!GradEnabled()) << "TransformerBlock::Decode runs under a NoGradScope";
  Tensor a = attn_->Decode(attn_norm_->Forward(x), cache);
  Tensor x1;
  const Tensor u1 = ffn_norm_->AddForward(x, a, &x1);
  MoeStats stats;
  stats.want_aux = false;
  return FeedForward(x1, u1, 1, x.dim(0), 0.0, &stats);
}

StatusOr<Tensor> TransformerBlock::FeedForward(const Tensor& x1, const Tensor& u, int64_t batch,
                                               int64_t seq_len, double aux_coeff, MoeStats* stats) {
  Tensor f;
  if (moe_) {
    MOE_ASSIGN_OR_RETURN(f, moe_->Forward(u, batch, seq_len, aux_coeff, stats));
  } else {
    parallel::ProfilePhase dense("dense ffn fwd");
    f = dense_->Forward(u);
  }
  kernels::Add(f, f, x1);
  return f;
}

StatusOr<Tensor> TransformerBlock::Backward(const Tensor& dy) {
  if (full_recompute_) {
    const Saved s = saved_.Pop();
    MoeStats again;  // the step's statistics were counted in the first forward
    again.want_aux = false;
    MOE_RETURN_IF_ERROR(Compute(s.x, s.batch, s.seq_len, s.aux_coeff, &again).status());
  }
  parallel::ProfilePhase phase("norms, residuals bwd");
  Tensor df;
  if (moe_) {
    MOE_ASSIGN_OR_RETURN(df, moe_->Backward(dy));
  } else {
    parallel::ProfilePhase dense("dense ffn bwd");
    df = dense_->Backward(dy);
  }
  Tensor dx1 = ffn_norm_->Backward(df, dy);  // plus the residual's gradient, in the same pass
  Tensor dattn;
  {
    parallel::ProfilePhase attn("attention projections bwd");  // the core: "attention bwd"
    dattn = attn_->Backward(dx1);
  }
  return attn_norm_->Backward(dattn, dx1);  // plus the residual's gradient
}

}  // namespace moe::model
