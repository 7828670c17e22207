#include "worker/engine/model/moe_layer.h"

#include <functional>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/swiglu.h"
#include "worker/engine/device.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/parallel/step_profile.h"

namespace moe::model {

MoeLayer::MoeLayer(ParamSet& params, const std::string& prefix, const ModelConfig& cfg,
                   uint64_t seed, double out_std, parallel::TokenDispatcher* dispatcher,
                   DType dtype, Device device, bool recompute_act)
    : name_(prefix),
      cfg_(cfg.moe),
      hidden_(cfg.hidden_size),
      dispatcher_(dispatcher),
      recompute_act_(recompute_act) {
  const int64_t h = cfg.hidden_size, e = cfg_.num_experts, f = cfg_.ffn_hidden;
  router_cfg_.top_k = cfg_.top_k;
  router_cfg_.num_groups = cfg_.num_groups;
  router_cfg_.topk_groups = cfg_.topk_groups;
  router_cfg_.sigmoid = cfg_.score_function == "sigmoid";
  router_cfg_.route_scale = cfg_.route_scale;
  // The bias steers selection once the model has one, whatever gamma is; not under forced balance
  // (the scores are random: nothing to steer).
  router_cfg_.use_bias = cfg_.has_bias() && !cfg_.force_balanced_routing;
  forced_salt_ = std::hash<std::string>{}(prefix);
  router_ = params.Add(prefix + ".router", {e, h}, seed, cfg.init_std);
  const int64_t el = dispatcher_->local_experts(), first = dispatcher_->first_local_expert();
  w13_ = params.Fp8Gemm(params.Add(prefix + ".experts.w13", {el, 2 * f, h}, seed, cfg.init_std, 0.0,
                                   true, true, first));
  w2_ = params.Fp8Gemm(
      params.Add(prefix + ".experts.w2", {el, h, f}, seed, out_std, 0.0, true, true, first));
  if (cfg_.num_shared_experts > 0) {
    shared_ = std::make_unique<SwigluFfn>(params, prefix + ".shared", h,
                                          f * cfg_.num_shared_experts, seed, cfg.init_std, out_std);
  }
  bias_ = Tensor::Zeros({e}, dtype, device);
}

MoeLayer::~MoeLayer() = default;

namespace {

// The experts' grouped GEMMs, in FP8 when w.fp8 (the tiles of layers.h's LinearBackward: rows 1 x
// 128, each expert's weight in 128 x 128 blocks; fp32 GEMM, the result rounded to y's dtype).
//   forward: y[rows_g] = x[rows_g] @ w[g]^T;   data backward (backward_data): y[rows_g] = x[rows_g]
//   @ w[g]
// On CUDA the FP8 GEMMs are cuBLASLt's, one per expert (no grouped block-scaled GEMM before
// cuBLAS 13.2).
void ExpertGemm(const Tensor& x, const Param& w, const std::vector<int64_t>& offsets,
                const Tensor& y, bool backward_data = false) {
  const auto gemm = backward_data ? kernels::GroupedGemmBackwardData : kernels::GroupedGemm;
  if (!w.fp8) return gemm(x, w.compute, offsets, y);
  Tensor y32 = Tensor::Empty(y.shape(), DType::kF32, y.device());
  if (!y.device().is_cuda()) {
    gemm(Fp8View(x, 1, kFp8Tile), Fp8View(w.compute, kFp8Tile, kFp8Tile), offsets, y32);
  } else {
    const int64_t n = w.compute.dim(1), k = w.compute.dim(2);
    for (size_t e = 0; e + 1 < offsets.size(); ++e) {
      const int64_t a = offsets[e], b = offsets[e + 1];
      if (a == b) continue;
      const Tensor we =
          w.compute.Rows(static_cast<int64_t>(e), static_cast<int64_t>(e) + 1).Reshape({n, k});
      if (backward_data)
        Fp8Dgrad(x.Rows(a, b), we, y32.Rows(a, b));
      else
        Fp8Forward(x.Rows(a, b), we, y32.Rows(a, b));
    }
  }
  kernels::Convert(y32, y);
}

}  // namespace

// A forward's seed under force_balanced_routing: a new draw, kept when the block will recompute
// this forward; a recompute's forward (want_aux false, gradients on) takes the oldest kept one
// (micro-batches are recomputed in the order they ran), so the backward follows the routing that
// made the loss.
uint64_t MoeLayer::ForcedSeed(const MoeStats& stats) {
  if (!stats.want_aux && GradEnabled() && !forced_pending_.empty()) {
    const uint64_t seed = forced_pending_.front();
    forced_pending_.pop_front();
    return seed;
  }
  const uint64_t seed = forced_salt_ ^ (++forced_draws_ * 0x9E3779B97F4A7C15ull);
  if (stats.recompute_follows) forced_pending_.push_back(seed);
  return seed;
}

StatusOr<Tensor> MoeLayer::Forward(const Tensor& x, int64_t batch, int64_t seq_len,
                                   double aux_coeff, MoeStats* stats) {
  const int64_t tokens = x.dim(0), e = cfg_.num_experts, k = cfg_.top_k;
  const Device dev = x.device();
  Saved s;
  s.batch = batch;
  s.seq = seq_len;
  s.aux_coeff = aux_coeff;
  s.x = x;
  // Route, in the routing dtype (fp32 when the activations are bf16: selection is sensitive to
  // rounding).
  const DType rt = bias_.dtype();
  parallel::ProfilePhase phase("router fwd");
  Tensor logits = Linear(x, router_->compute, rt);
  // Measurements' balanced load: the router's scores give way to random ones (its GEMM ran, and
  // its backward runs on the random scores' gradient: the same work).
  if (cfg_.force_balanced_routing) kernels::FillUniform(logits, ForcedSeed(*stats));
  s.scores = Tensor::Empty({tokens, e}, rt, dev);
  s.topk_idx = Tensor::Empty({tokens, k}, DType::kI32, dev);
  s.topk_w = Tensor::Empty({tokens, k}, rt, dev);
  kernels::RouterForward(logits, bias_, router_cfg_, s.scores, s.topk_idx, s.topk_w);
  if (cfg_.seq_aux_loss_coeff > 0 && !stats->want_aux) {
    // a recompute's forward: its balance loss was counted in the first
  } else if (cfg_.seq_aux_loss_coeff > 0 && stats->aux_sink.set()) {
    kernels::SeqAuxLossInto(s.scores, k, batch, seq_len, aux_coeff, Tensor(), stats->aux_sink.acc,
                            stats->aux_sink.slot);
  } else if (cfg_.seq_aux_loss_coeff > 0) {
    stats->aux_loss = kernels::SeqAuxLoss(s.scores, k, batch, seq_len, aux_coeff, Tensor());
  }
  stats->routing = s.topk_idx;
  // Permute by expert: the plan is built on the device; its per-expert counts are the layer's one
  // host read (the grouped GEMMs' sizes and the all-to-all's splits need them on the host).
  phase.Switch("dispatch, permute fwd");
  Tensor counts_dev = Tensor::Empty({e}, DType::kI64, dev);
  s.row_of_slot = Tensor::Empty({tokens, k}, DType::kI32, dev);
  Tensor token_of_row = Tensor::Empty({tokens * k}, DType::kI32, dev);
  kernels::BuildDispatchPlanOnDevice(s.topk_idx, e, counts_dev, s.row_of_slot, token_of_row);
  CountCpuStandInRead(counts_dev);  // CUDA counts its own copy
  stats->tokens_per_expert = counts_dev.ToVector<int64_t>();
  Tensor xp = Tensor::Empty({tokens * k, hidden_}, x.dtype(), dev);
  kernels::GatherRows(x, token_of_row, xp);
  // Experts, wherever they live; the shared experts run on every token while the rows travel (the
  // DeepSeek-V3 arrangement: on CUDA the all-to-all runs on the communicator's stream beside them).
  parallel::TokenDispatcher::InFlight moving;
  MOE_RETURN_IF_ERROR(dispatcher_->DispatchStart(xp, stats->tokens_per_expert, &s.route, &moving));
  phase.Switch("shared expert fwd");
  Tensor out = shared_ ? shared_->Forward(x) : Tensor::Zeros({tokens, hidden_}, x.dtype(), dev);
  phase.Switch("dispatch, permute fwd");
  s.topk_w_c = CastTo(s.topk_w, x.dtype());
  MOE_ASSIGN_OR_RETURN(s.x_local, dispatcher_->Finish(&moving, s.route));
  phase.Switch("experts fwd");
  const int64_t rows = s.x_local.dim(0), f = cfg_.ffn_hidden;
  s.gate_up = Tensor::Empty({rows, 2 * f}, x.dtype(), dev);
  ExpertGemm(s.x_local, *w13_, s.route.local_offsets, s.gate_up);
  Tensor act = Tensor::Empty({rows, f}, x.dtype(), dev);
  kernels::SwigluForward(s.gate_up, act);
  Tensor y_local = Tensor::Empty({rows, hidden_}, x.dtype(), dev);
  ExpertGemm(act, *w2_, s.route.local_offsets, y_local);
  if (!recompute_act_) s.act = act;
  phase.Switch("combine fwd");
  MOE_RETURN_IF_ERROR(dispatcher_->CombineStart(y_local, s.route, &moving));
  MOE_ASSIGN_OR_RETURN(s.yp, dispatcher_->Finish(&moving, s.route));
  // The weighted sum of the routed outputs, added to the shared experts'.
  kernels::CombineForward(s.yp, s.row_of_slot, s.topk_w_c, out);
  saved_.Push(std::move(s));
  return out;
}

StatusOr<Tensor> MoeLayer::Backward(const Tensor& dy) {
  Saved s = saved_.Pop();
  const int64_t tokens = dy.dim(0);
  const Device dev = dy.device();
  // Combine, then its gradient on the way back to the experts while the shared experts' backward
  // runs.
  parallel::ProfilePhase phase("combine bwd");
  Tensor dyp = Tensor::Empty(s.yp.shape(), dy.dtype(), dev);
  Tensor dw = Tensor::Empty(s.topk_w.shape(), dy.dtype(), dev);
  kernels::CombineBackward(dy, s.yp, s.row_of_slot, s.topk_w_c, dyp, dw);
  parallel::TokenDispatcher::InFlight moving;
  MOE_RETURN_IF_ERROR(dispatcher_->CombineBackwardStart(dyp, s.route, &moving));
  phase.Switch("shared expert bwd");
  Tensor dx = shared_ ? shared_->Backward(dy) : Tensor::Zeros({tokens, hidden_}, dy.dtype(), dev);
  phase.Switch("combine bwd");
  MOE_ASSIGN_OR_RETURN(Tensor dy_local, dispatcher_->Finish(&moving, s.route));
  // Experts; their rows' gradient travels back while the router's backward runs.
  phase.Switch("experts bwd");
  MOE_ASSIGN_OR_RETURN(Tensor dx_local, ExpertsBackward(s, dy_local));
  phase.Switch("dispatch, permute bwd");
  MOE_RETURN_IF_ERROR(dispatcher_->DispatchBackwardStart(dx_local, s.route, &moving));
  phase.Switch("router bwd");
  const Tensor dx_router = RouterBackward(s, dw);
  phase.Switch("dispatch, permute bwd");
  MOE_ASSIGN_OR_RETURN(Tensor dxp, dispatcher_->Finish(&moving, s.route));
  Tensor dx_routed = Tensor::Empty({tokens, hidden_}, dy.dtype(), dev);
  kernels::PermuteBackward(dxp, s.row_of_slot, dx_routed);
  kernels::Add(dx, dx, dx_routed);
  kernels::Add(dx, dx, dx_router);
  return dx;
}

namespace {

// dw[e] += dy[rows of e]^T x[rows of e] for each local expert e. Deterministic training adds one
// contribution per (expert, source rank) segment, the rows one rank's micro-batch sent: the same
// GEMM over the same rows as at any other layout, so the accumulated sum is the same too. FP8
// (w.fp8): dy and x in 128 x 1 tiles along the rows that restart at each expert's (deterministic:
// each segment's) first row, so a tile never mixes rows of two GEMMs.
// FP8 on CUDA: cuBLASLt's weight-gradient GEMM per group (an expert, or deterministically one
// source rank's rows of it), so the tiles along the tokens restart at each group as the emulation's
// do.
void Fp8ExpertWeightGradOnDevice(const Tensor& dy, const Tensor& x,
                                 const parallel::TokenDispatcher::Route& route, const Param& w) {
  const std::vector<int64_t>& groups = w.accum.defined() ? route.segments : route.local_offsets;
  const int64_t experts = static_cast<int64_t>(route.local_offsets.size()) - 1;
  const int64_t per = (static_cast<int64_t>(groups.size()) - 1) / std::max<int64_t>(experts, 1);
  for (int64_t g = 0; g + 1 < static_cast<int64_t>(groups.size()); ++g) {
    const int64_t a = groups[static_cast<size_t>(g)], b = groups[static_cast<size_t>(g) + 1];
    if (a == b) continue;
    GradSink dw(w, g / per, 1);
    Fp8Wgrad(dy.Rows(a, b), x.Rows(a, b), dw.tensor().Reshape({w.grad.dim(1), w.grad.dim(2)}));
    dw.Commit();
  }
}

void ExpertWeightGrad(const Tensor& dy_in, const Tensor& x_in,
                      const parallel::TokenDispatcher::Route& route, const Param& w) {
  if (w.fp8 && dy_in.device().is_cuda()) return Fp8ExpertWeightGradOnDevice(dy_in, x_in, route, w);
  Tensor dy = dy_in, x = x_in;
  if (w.fp8) {
    const std::vector<int64_t>& groups = w.accum.defined() ? route.segments : route.local_offsets;
    dy = Fp8View(dy_in, kFp8Tile, 1, groups);
    x = Fp8View(x_in, kFp8Tile, 1, groups);
  }
  if (!w.accum.defined())
    return kernels::GroupedGemmBackwardWeight(dy, x, route.local_offsets, w.grad);
  const int64_t experts = static_cast<int64_t>(route.local_offsets.size()) - 1;
  const int64_t sources =
      (static_cast<int64_t>(route.segments.size()) - 1) / std::max<int64_t>(experts, 1);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < sources; ++r) {
      const int64_t a = route.segments[static_cast<size_t>(e * sources + r)],
                    b = route.segments[static_cast<size_t>(e * sources + r + 1)];
      if (a == b) continue;
      GradSink dw(w, e, 1);
      dw.AddGemm(dy.Rows(a, b), true, x.Rows(a, b), false);
      dw.Commit();
    }
  }
}

}  // namespace

// The grouped SwiGLU experts' backward on this rank's rows: their weight gradients, the rows'
// gradient.
StatusOr<Tensor> MoeLayer::ExpertsBackward(Saved& s, const Tensor& dy_local) {
  const int64_t rows = dy_local.dim(0);
  const Device dev = dy_local.device();
  if (recompute_act_) {
    s.act = Tensor::Empty({rows, cfg_.ffn_hidden}, dy_local.dtype(), dev);
    kernels::SwigluForward(s.gate_up, s.act);
  }
  Tensor dact = Tensor::Empty(s.act.shape(), dy_local.dtype(), dev);
  ExpertGemm(dy_local, *w2_, s.route.local_offsets, dact, /*backward_data=*/true);
  ExpertWeightGrad(dy_local, s.act, s.route, *w2_);
  Tensor dgu = Tensor::Empty(s.gate_up.shape(), dy_local.dtype(), dev);
  kernels::SwigluBackward(s.gate_up, dact, dgu);
  ExpertWeightGrad(dgu, s.x_local, s.route, *w13_);
  Tensor dx_local = Tensor::Empty({rows, hidden_}, dy_local.dtype(), dev);
  ExpertGemm(dgu, *w13_, s.route.local_offsets, dx_local, /*backward_data=*/true);
  return dx_local;
}

// The router: the weights' gradient plus the balance loss's, through the scores to the logits and
// x.
Tensor MoeLayer::RouterBackward(const Saved& s, const Tensor& dw) {
  const int64_t tokens = s.x.dim(0), e = cfg_.num_experts;
  const Device dev = s.x.device();
  const DType rt = s.scores.dtype();
  Tensor dscores;
  if (cfg_.seq_aux_loss_coeff > 0) {
    dscores = Tensor::Zeros({tokens, e}, rt, dev);
    // Only its gradient is wanted here: the loss goes to a scratch slot on the device, not to the
    // host.
    const Tensor unused = Tensor::Zeros({1}, DType::kF64, dev);
    kernels::SeqAuxLossInto(s.scores, cfg_.top_k, s.batch, s.seq, s.aux_coeff, dscores, unused, 0);
  }
  Tensor dlogits = Tensor::Empty({tokens, e}, rt, dev);
  kernels::RouterBackward(s.scores, s.topk_idx, CastTo(dw, rt), dscores, router_cfg_, dlogits);
  return LinearBackward(CastTo(dlogits, dw.dtype()), s.x, *router_);
}

void MoeLayer::UpdateBias(const std::vector<double>& global_counts, double rate) {
  const int64_t e = cfg_.num_experts;
  MOE_CHECK(static_cast<int64_t>(global_counts.size()) == e)
      << "bias update with " << global_counts.size() << " counts";
  double mean = 0;
  for (double c : global_counts) mean += c;
  mean /= static_cast<double>(e);
  // The steps are made on the host from the host counts and added on the device: no read of the
  // bias.
  Tensor delta = Tensor::Empty({e}, bias_.dtype());
  for (int64_t i = 0; i < e; ++i) {
    const double c = global_counts[static_cast<size_t>(i)];
    const double step = c < mean ? rate : (c > mean ? -rate : 0.0);
    if (delta.dtype() == DType::kF32)
      delta.data<float>()[i] = static_cast<float>(step);
    else
      delta.data<double>()[i] = step;
  }
  kernels::Add(bias_, bias_, bias_.device().is_cpu() ? delta : delta.Clone(bias_.device()));
}

void MoeLayer::SetBias(const std::vector<float>& values) {
  MOE_CHECK(static_cast<int64_t>(values.size()) == bias_.numel())
      << "bias of " << values.size() << " values";
  Tensor host = Tensor::Empty({bias_.numel()}, bias_.dtype());
  for (size_t i = 0; i < values.size(); ++i) {
    if (host.dtype() == DType::kF32)
      host.data<float>()[i] = values[i];
    else
      host.data<double>()[i] = values[i];
  }
  bias_.CopyFrom(host);
}

}  // namespace moe::model
