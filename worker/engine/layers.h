// The sublayers of a DeepSeek-V3 transformer block, each with a hand-written backward.
//
// Each Forward saves what its Backward needs; Backward consumes it, accumulates parameter gradients
// and returns the gradient of the input. One micro-batch is in flight per layer at a time (forward,
// then backward), which is how the model uses them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/moe_layer.h"
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

// What the attention layers share: the run's shape and where their constants live.
struct AttentionContext {
  int64_t max_seq_len = 0;  // the run's sequence length: YaRN applies when it exceeds the original
  DType dtype = DType::kF32;  // of the rope frequencies: the master dtype (f64 in gradient checks)
  Device device;
};

// Causal self-attention of a block: multi-head (MHA) or DeepSeek's multi-head latent (MLA).
class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  //   x [batch * seq_len, h] -> [batch * seq_len, h]
  virtual Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) = 0;
  virtual Tensor Backward(const Tensor& dy) = 0;
};

// The attention of `cfg` (mha or mla), its parameters named under `prefix`.
std::unique_ptr<AttentionLayer> MakeAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg,
                                              uint64_t seed, double out_std, const AttentionContext& ctx);

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

// One pre-norm transformer block: x + attn(norm(x)), then + ffn(norm(.)) where the FFN is a dense
// SwiGLU or the MoE layer.
class TransformerBlock {
 public:
  TransformerBlock(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, bool moe, uint64_t seed,
                   double out_std, TokenDispatcher* dispatcher, DType routing_dtype, const AttentionContext& ctx);
  //   x [batch * seq_len, h]; aux_coeff: alpha / (sequences in the global batch); stats filled for a MoE block
  StatusOr<Tensor> Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff, MoeStats* stats);
  StatusOr<Tensor> Backward(const Tensor& dy);
  MoeLayer* moe() const { return moe_.get(); }

 private:
  std::unique_ptr<RmsNorm> attn_norm_, ffn_norm_;
  std::unique_ptr<AttentionLayer> attn_;
  std::unique_ptr<SwigluFfn> dense_;
  std::unique_ptr<MoeLayer> moe_;
};

}  // namespace moe
