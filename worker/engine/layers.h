// The sublayers of a DeepSeek-V3-style transformer block, each with a hand-written backward.
//
// Each Forward saves what its Backward needs; Backward consumes it, accumulates parameter gradients
// and returns the gradient of the input. One micro-batch is in flight at a time (forward, then
// backward), which is how the trainer uses them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/router.h"
#include <optional>

#include "kernels/tensor.h"
#include "worker/engine/dispatcher.h"
#include "worker/engine/param.h"

namespace moe {

// y = x @ w^T.   x [T, in], w [out, in] -> y [T, out], in x's dtype or in `out_dtype` (fp32 logits of
// bf16 activations).
Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype = std::nullopt);
// w.grad += dy^T @ x (in the gradient's dtype); returns dx = dy @ w.compute, in dy's dtype.
Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w);
// `t` in `dtype` (itself when it already is).
Tensor CastTo(const Tensor& t, DType dtype);

class RmsNorm {
 public:
  RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  Param* w_;
  double eps_;
  Tensor x_, rstd_;
};

// Causal multi-head self-attention with RoPE: fused qkv projection, attention core, output projection.
class Attention {
 public:
  Attention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std);
  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len);
  Tensor Backward(const Tensor& dy);

 private:
  int64_t heads_, head_dim_;
  double theta_;
  Param* wqkv_;  // [3h, h]
  Param* wo_;    // [h, h]
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_, qkv_, probs_, ctx_;
};

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)); gate and up fused in one [2F, h] weight.
class SwigluFfn {
 public:
  SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn, uint64_t seed, double std,
            double out_std);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  Param* w13_;  // [2F, h]
  Param* w2_;   // [h, F]
  Tensor x_, gate_up_, act_;
};

// What a MoE layer reports per micro-batch.
struct MoeStats {
  std::vector<int64_t> tokens_per_expert;  // [E] on this rank, this micro-batch
  double aux_loss = 0;                     // this rank's share of the sequence-wise balance loss
};

// DeepSeek-V3 MoE: router with biased, group-limited top-k selection; dropless dispatch to routed
// experts (grouped SwiGLU GEMMs) through the TokenDispatcher; weighted combine; shared experts; the
// sequence-wise balance loss. The per-expert bias steers selection only and is updated outside
// (aux-loss-free balancing), never by gradients.
class MoeLayer {
 public:
  MoeLayer(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std,
           TokenDispatcher* dispatcher, DType dtype, Device device);  // dtype: the routing's (fp32 or f64)
  // aux_coeff: alpha / (sequences in the global batch), so the summed loss is the global mean.
  StatusOr<Tensor> Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff, MoeStats* stats);
  StatusOr<Tensor> Backward(const Tensor& dy);

  const Tensor& bias() const { return bias_; }  // [E], selection bias (host-updated)
  // b_i += rate * sign(mean(c) - c_i) from the step's global token counts.
  void UpdateBias(const std::vector<double>& global_counts, double rate);
  void SetBias(const std::vector<float>& values);

 private:
  const MoeConfig cfg_;
  kernels::RouterConfig router_cfg_;
  int64_t hidden_;
  TokenDispatcher* dispatcher_;
  Param* router_;     // [E, h]
  Param* w13_;        // [E_local, 2F, h]
  Param* w2_;         // [E_local, h, F]
  std::unique_ptr<SwigluFfn> shared_;
  Tensor bias_;
  // Saved for the backward.
  int64_t batch_ = 0, seq_ = 0;
  double aux_coeff_ = 0;
  // Routing runs in fp32 (scores_, topk_w_); topk_w_c_ is the weights in the activations' dtype.
  Tensor x_, scores_, topk_idx_, topk_w_, topk_w_c_, row_of_slot_, x_local_, gate_up_, act_, yp_;
  TokenDispatcher::Route route_;
};

}  // namespace moe
