#include "worker/engine/layers.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace moe {

Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype) {
  Tensor y = Tensor::Empty({x.dim(0), w.dim(0)}, out_dtype.value_or(x.dtype()), x.device());
  kernels::Gemm(x, false, w, true, y);
  return y;
}

Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w) {
  kernels::Gemm(dy, true, x, false, w.grad, 1.0, 1.0);
  Tensor dx = Tensor::Empty({dy.dim(0), w.compute.dim(1)}, dy.dtype(), dy.device());
  kernels::Gemm(dy, false, w.compute, false, dx);
  return dx;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  Tensor out = Tensor::Empty(t.shape(), dtype, t.device());
  kernels::Convert(t, out);
  return out;
}

// --- RmsNorm ---------------------------------------------------------------------------------------

RmsNorm::RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed) : eps_(eps) {
  w_ = params.Add(name, {dim}, seed, 0.0, 1.0, /*weight_decay=*/false);
}

Tensor RmsNorm::Forward(const Tensor& x) {
  x_ = x;
  rstd_ = Tensor::Empty({x.dim(0)}, AccumType(x.dtype()), x.device());
  Tensor y = Tensor::Empty(x.shape(), x.dtype(), x.device());
  kernels::RmsNormForward(x, w_->compute, eps_, y, rstd_);
  return y;
}

Tensor RmsNorm::Backward(const Tensor& dy) {
  Tensor dx = Tensor::Empty(dy.shape(), dy.dtype(), dy.device());
  kernels::RmsNormBackward(dy, x_, w_->compute, rstd_, dx, w_->grad);
  x_ = rstd_ = Tensor();
  return dx;
}

// --- Attention -------------------------------------------------------------------------------------

Attention::Attention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std)
    : heads_(cfg.num_heads), head_dim_(cfg.head_dim()), theta_(cfg.rope_theta) {
  const int64_t h = cfg.hidden_size;
  wqkv_ = params.Add(prefix + ".wqkv", {3 * h, h}, seed, cfg.init_std);
  wo_ = params.Add(prefix + ".wo", {h, h}, seed, out_std);
}

Tensor Attention::Forward(const Tensor& x, int64_t batch, int64_t seq_len) {
  batch_ = batch;
  seq_ = seq_len;
  x_ = x;
  qkv_ = Linear(x, wqkv_->compute);
  kernels::RopeForward(qkv_, seq_len, heads_, head_dim_, theta_);
  ctx_ = Tensor::Empty({x.dim(0), heads_ * head_dim_}, x.dtype(), x.device());
  probs_ = Tensor::Empty({batch, heads_, seq_len, seq_len}, x.dtype(), x.device());
  kernels::AttentionForward(qkv_, batch, seq_len, heads_, head_dim_, ctx_, probs_);
  return Linear(ctx_, wo_->compute);
}

Tensor Attention::Backward(const Tensor& dy) {
  Tensor dctx = LinearBackward(dy, ctx_, *wo_);
  Tensor dqkv = Tensor::Empty(qkv_.shape(), dy.dtype(), dy.device());
  kernels::AttentionBackward(qkv_, probs_, dctx, batch_, seq_, heads_, head_dim_, dqkv);
  kernels::RopeBackward(dqkv, seq_, heads_, head_dim_, theta_);
  Tensor dx = LinearBackward(dqkv, x_, *wqkv_);
  x_ = qkv_ = probs_ = ctx_ = Tensor();
  return dx;
}

// --- SwigluFfn -------------------------------------------------------------------------------------

SwigluFfn::SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn, uint64_t seed, double std,
                     double out_std) {
  w13_ = params.Add(prefix + ".w13", {2 * ffn, hidden}, seed, std);
  w2_ = params.Add(prefix + ".w2", {hidden, ffn}, seed, out_std);
}

Tensor SwigluFfn::Forward(const Tensor& x) {
  x_ = x;
  gate_up_ = Linear(x, w13_->compute);
  act_ = Tensor::Empty({x.dim(0), w2_->compute.dim(1)}, x.dtype(), x.device());
  kernels::SwigluForward(gate_up_, act_);
  return Linear(act_, w2_->compute);
}

Tensor SwigluFfn::Backward(const Tensor& dy) {
  Tensor dact = LinearBackward(dy, act_, *w2_);
  Tensor dgu = Tensor::Empty(gate_up_.shape(), dy.dtype(), dy.device());
  kernels::SwigluBackward(gate_up_, dact, dgu);
  Tensor dx = LinearBackward(dgu, x_, *w13_);
  x_ = gate_up_ = act_ = Tensor();
  return dx;
}

// --- MoeLayer --------------------------------------------------------------------------------------

MoeLayer::MoeLayer(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std,
                   TokenDispatcher* dispatcher, DType dtype, Device device)
    : cfg_(cfg.moe), hidden_(cfg.hidden_size), dispatcher_(dispatcher) {
  const int64_t h = cfg.hidden_size, e = cfg_.num_experts, f = cfg_.ffn_hidden;
  router_cfg_.top_k = cfg_.top_k;
  router_cfg_.num_groups = cfg_.num_groups;
  router_cfg_.topk_groups = cfg_.topk_groups;
  router_cfg_.sigmoid = cfg_.score_function == "sigmoid";
  router_cfg_.route_scale = cfg_.route_scale;
  router_cfg_.use_bias = cfg_.bias_update_rate > 0;
  router_ = params.Add(prefix + ".router", {e, h}, seed, cfg.init_std);
  const int64_t el = dispatcher_->local_experts(), first = dispatcher_->first_local_expert();
  w13_ = params.Add(prefix + ".experts.w13", {el, 2 * f, h}, seed, cfg.init_std, 0.0, true, true, first);
  w2_ = params.Add(prefix + ".experts.w2", {el, h, f}, seed, out_std, 0.0, true, true, first);
  if (cfg_.num_shared_experts > 0) {
    shared_ = std::make_unique<SwigluFfn>(params, prefix + ".shared", h, f * cfg_.num_shared_experts, seed, cfg.init_std,
                                          out_std);
  }
  bias_ = Tensor::Zeros({e}, dtype, device);
}

StatusOr<Tensor> MoeLayer::Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff, MoeStats* stats) {
  const int64_t tokens = x.dim(0), e = cfg_.num_experts, k = cfg_.top_k;
  const Device dev = x.device();
  batch_ = batch;
  seq_ = seq_len;
  aux_coeff_ = aux_coeff;
  x_ = x;
  // Route, in the routing dtype (fp32 when the activations are bf16: selection is sensitive to rounding).
  const DType rt = bias_.dtype();
  Tensor logits = Linear(x, router_->compute, rt);
  scores_ = Tensor::Empty({tokens, e}, rt, dev);
  topk_idx_ = Tensor::Empty({tokens, k}, DType::kI32, dev);
  topk_w_ = Tensor::Empty({tokens, k}, rt, dev);
  kernels::RouterForward(logits, bias_, router_cfg_, scores_, topk_idx_, topk_w_);
  stats->aux_loss = cfg_.seq_aux_loss_coeff > 0
                        ? kernels::SeqAuxLoss(scores_, topk_idx_, batch, seq_len, aux_coeff, Tensor())
                        : 0.0;
  // Permute by expert (host plan from the routing decisions).
  const std::vector<int32_t> idx = topk_idx_.ToVector<int32_t>();
  kernels::DispatchPlan plan = kernels::BuildDispatchPlan(idx.data(), tokens, k, e);
  stats->tokens_per_expert = plan.counts;
  row_of_slot_ = Tensor::FromVector(plan.row_of_slot, {tokens, k}).Clone(dev);
  Tensor token_of_row = Tensor::FromVector(plan.token_of_row, {tokens * k}).Clone(dev);
  Tensor xp = Tensor::Empty({tokens * k, hidden_}, x.dtype(), dev);
  kernels::GatherRows(x, token_of_row, xp);
  // Experts, wherever they live.
  MOE_ASSIGN_OR_RETURN(x_local_, dispatcher_->Dispatch(xp, plan.counts, &route_));
  const int64_t rows = x_local_.dim(0), f = cfg_.ffn_hidden;
  gate_up_ = Tensor::Empty({rows, 2 * f}, x.dtype(), dev);
  kernels::GroupedGemm(x_local_, w13_->compute, route_.local_offsets, gate_up_);
  act_ = Tensor::Empty({rows, f}, x.dtype(), dev);
  kernels::SwigluForward(gate_up_, act_);
  Tensor y_local = Tensor::Empty({rows, hidden_}, x.dtype(), dev);
  kernels::GroupedGemm(act_, w2_->compute, route_.local_offsets, y_local);
  MOE_ASSIGN_OR_RETURN(yp_, dispatcher_->Combine(y_local, route_));
  // Shared experts on every token, then the weighted sum of the routed outputs.
  Tensor out = shared_ ? shared_->Forward(x) : Tensor::Zeros({tokens, hidden_}, x.dtype(), dev);
  topk_w_c_ = CastTo(topk_w_, x.dtype());
  kernels::CombineForward(yp_, row_of_slot_, topk_w_c_, out);
  return out;
}

StatusOr<Tensor> MoeLayer::Backward(const Tensor& dy) {
  const int64_t tokens = dy.dim(0), e = cfg_.num_experts;
  const Device dev = dy.device();
  Tensor dx = shared_ ? shared_->Backward(dy) : Tensor::Zeros({tokens, hidden_}, dy.dtype(), dev);
  // Combine.
  Tensor dyp = Tensor::Empty(yp_.shape(), dy.dtype(), dev);
  Tensor dw = Tensor::Empty(topk_w_.shape(), dy.dtype(), dev);
  kernels::CombineBackward(dy, yp_, row_of_slot_, topk_w_c_, dyp, dw);
  // Experts.
  MOE_ASSIGN_OR_RETURN(Tensor dy_local, dispatcher_->CombineBackward(dyp, route_));
  const int64_t rows = dy_local.dim(0);
  Tensor dact = Tensor::Empty(act_.shape(), dy.dtype(), dev);
  kernels::GroupedGemmBackwardData(dy_local, w2_->compute, route_.local_offsets, dact);
  kernels::GroupedGemmBackwardWeight(dy_local, act_, route_.local_offsets, w2_->grad);
  Tensor dgu = Tensor::Empty(gate_up_.shape(), dy.dtype(), dev);
  kernels::SwigluBackward(gate_up_, dact, dgu);
  kernels::GroupedGemmBackwardWeight(dgu, x_local_, route_.local_offsets, w13_->grad);
  Tensor dx_local = Tensor::Empty({rows, hidden_}, dy.dtype(), dev);
  kernels::GroupedGemmBackwardData(dgu, w13_->compute, route_.local_offsets, dx_local);
  MOE_ASSIGN_OR_RETURN(Tensor dxp, dispatcher_->DispatchBackward(dx_local, route_));
  Tensor dx_routed = Tensor::Empty({tokens, hidden_}, dy.dtype(), dev);
  kernels::PermuteBackward(dxp, row_of_slot_, dx_routed);
  kernels::Add(dx, dx, dx_routed);
  // Router: weights' gradient plus the balance loss's, through the scores to the logits.
  const DType rt = scores_.dtype();
  Tensor dscores;
  if (cfg_.seq_aux_loss_coeff > 0) {
    dscores = Tensor::Zeros({tokens, e}, rt, dev);
    kernels::SeqAuxLoss(scores_, topk_idx_, batch_, seq_, aux_coeff_, dscores);
  }
  Tensor dlogits = Tensor::Empty({tokens, e}, rt, dev);
  kernels::RouterBackward(scores_, topk_idx_, CastTo(dw, rt), dscores, router_cfg_, dlogits);
  Tensor dx_router = LinearBackward(CastTo(dlogits, dy.dtype()), x_, *router_);
  kernels::Add(dx, dx, dx_router);
  x_ = scores_ = topk_idx_ = topk_w_ = topk_w_c_ = row_of_slot_ = x_local_ = gate_up_ = act_ = yp_ = Tensor();
  return dx;
}

void MoeLayer::UpdateBias(const std::vector<double>& global_counts, double rate) {
  const int64_t e = cfg_.num_experts;
  MOE_CHECK(static_cast<int64_t>(global_counts.size()) == e) << "bias update with " << global_counts.size() << " counts";
  double mean = 0;
  for (double c : global_counts) mean += c;
  mean /= static_cast<double>(e);
  Tensor host = bias_.Clone(Device::Cpu());
  for (int64_t i = 0; i < e; ++i) {
    const double c = global_counts[static_cast<size_t>(i)];
    const double step = c < mean ? rate : (c > mean ? -rate : 0.0);
    if (host.dtype() == DType::kF32) host.data<float>()[i] += static_cast<float>(step);
    else host.data<double>()[i] += step;
  }
  bias_.CopyFrom(host);
}

void MoeLayer::SetBias(const std::vector<float>& values) {
  MOE_CHECK(static_cast<int64_t>(values.size()) == bias_.numel()) << "bias of " << values.size() << " values";
  Tensor host = Tensor::Empty({bias_.numel()}, bias_.dtype());
  for (size_t i = 0; i < values.size(); ++i) {
    if (host.dtype() == DType::kF32) host.data<float>()[i] = values[i];
    else host.data<double>()[i] = values[i];
  }
  bias_.CopyFrom(host);
}

}  // namespace moe
