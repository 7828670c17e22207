#include "worker/engine/moe_layer.h"

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/swiglu.h"
#include "worker/engine/layers.h"

namespace moe {

MoeLayer::MoeLayer(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std,
                   TokenDispatcher* dispatcher, DType dtype, Device device)
    : name_(prefix), cfg_(cfg.moe), hidden_(cfg.hidden_size), dispatcher_(dispatcher) {
  const int64_t h = cfg.hidden_size, e = cfg_.num_experts, f = cfg_.ffn_hidden;
  router_cfg_.top_k = cfg_.top_k;
  router_cfg_.num_groups = cfg_.num_groups;
  router_cfg_.topk_groups = cfg_.topk_groups;
  router_cfg_.sigmoid = cfg_.score_function == "sigmoid";
  router_cfg_.route_scale = cfg_.route_scale;
  router_cfg_.use_bias = cfg_.has_bias();  // the bias steers selection once the model has one, whatever gamma is
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

MoeLayer::~MoeLayer() = default;

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
  stats->aux_loss = cfg_.seq_aux_loss_coeff > 0 ? kernels::SeqAuxLoss(scores_, k, batch, seq_len, aux_coeff, Tensor()) : 0.0;
  stats->routing = topk_idx_;
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
    kernels::SeqAuxLoss(scores_, cfg_.top_k, batch_, seq_, aux_coeff_, dscores);
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
