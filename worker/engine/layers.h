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
#include "worker/engine/saved.h"

namespace moe {

// y = x @ w^T.   x [T, in], w [out, in] -> y [T, out], in x's dtype or in `out_dtype` (fp32 logits of
// bf16 activations).
Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype = std::nullopt);
// The same with a parameter: in FP8 when w.fp8 (ParamSet::Fp8Gemm under --precision fp8).
Tensor Linear(const Tensor& x, const Param& w);
// w.grad += dy^T @ x (in the gradient's dtype); returns dx = dy @ w.compute, in dy's dtype.
// FP8 when w.fp8, DeepSeek-V3's three GEMMs of a linear layer: each input quantised to e4m3 in tiles
// (activations and output gradients 1 x 128 along the reduction: x, dy in Fprop and Dgrad, 128 x 1
// along the tokens in Wgrad; weights 128 x 128), then an fp32 GEMM of the dequantised values (the
// emulation kernels/fp8.h defines; fp32 accumulation), the result in the activations' dtype.
Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w);
// The tiles (DeepSeek-V3's): 1 x 128 for activations and gradients, 128 x 128 for weights.
inline constexpr int64_t kFp8Tile = 128;
// x quantised and dequantised in FP8 (f32, x's shape): tiles of tile_rows x tile_cols (Fp8QuantDequant).
Tensor Fp8View(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const std::vector<int64_t>& row_groups = {});
// The three FP8 GEMMs of a linear layer with those tiles (w [N, K]; fp32 results): on CUDA cuBLASLt's
// block-scaled e4m3 GEMMs (kernels/fp8.h), on the CPU the emulation (Fp8View, then an fp32 GEMM).
//   Fp8Forward: y32 = x . w^T;   Fp8Dgrad: dx32 = dy . w;   Fp8Wgrad: dw += dy^T . x (dw in any float dtype)
void Fp8Forward(const Tensor& x, const Tensor& w, const Tensor& y32);
void Fp8Dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32);
void Fp8Wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw);
// `t` in `dtype` (itself when it already is).
Tensor CastTo(const Tensor& t, DType dtype);

// Selective recompute (training.recompute): what a layer does not keep for its backward and computes
// again there. Results are bitwise those without recompute: the same kernels on the same inputs.
struct Recompute {
  bool core_attn = false;    // the attention core: only q, k, v kept
  bool mla_up_proj = false;  // MLA's up-projections (q from its latent, k_nope and v from the kv latent)
  bool mlp = false;          // the dense blocks' FFN: only its input kept
  bool moe_act = false;      // the routed experts' SwiGLU activation
  bool full = false;         // whole blocks: only each block's input kept
  // From the spec's names; INVALID_ARGUMENT for an unknown one.
  static Recompute From(const std::vector<std::string>& names);
};

class RmsNorm {
 public:
  RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  struct Saved {
    Tensor x, rstd;
  };
  Param* w_;
  double eps_;
  SavedQueue<Saved> saved_;
};

// What the attention layers share: the run's shape, where their constants live, what they recompute.
struct AttentionContext {
  int64_t max_seq_len = 0;  // the run's sequence length: YaRN applies when it exceeds the original
  DType dtype = DType::kF32;  // of the rope frequencies: the master dtype (f64 in gradient checks)
  Device device;
  Recompute recompute;
  // training.attention: materialized keeps the [B, H, S, S] probabilities instead of each row's
  // log-sum-exp (CPU only; the reference for memory and speed).
  bool materialized_attention = false;
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
  // recompute: keep only the input, compute gate|up and the activation again in Backward.
  SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn, uint64_t seed, double std,
            double out_std, bool recompute = false);
  Tensor Forward(const Tensor& x);
  Tensor Backward(const Tensor& dy);

 private:
  struct Saved {
    Tensor x, gate_up, act;
  };
  Param* w13_;  // [2F, h]
  Param* w2_;   // [h, F]
  bool recompute_;
  SavedQueue<Saved> saved_;
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
  StatusOr<Tensor> Compute(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff, MoeStats* stats);
  // With full recompute: the block's input and shape, to run its forward again before the backward.
  struct Saved {
    Tensor x;
    int64_t batch = 0, seq_len = 0;
    double aux_coeff = 0;
  };
  std::unique_ptr<RmsNorm> attn_norm_, ffn_norm_;
  std::unique_ptr<AttentionLayer> attn_;
  std::unique_ptr<SwigluFfn> dense_;
  std::unique_ptr<MoeLayer> moe_;
  bool full_recompute_;
  SavedQueue<Saved> saved_;
};

}  // namespace moe
