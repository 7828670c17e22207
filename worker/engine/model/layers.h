// The basic sublayers of a DeepSeek-V3 transformer block (linear and FP8 GEMMs, RMSNorm, the dense
// SwiGLU FFN), each with a hand-written backward. The attention is in attention.h, the MoE layer in
// moe_layer.h, the block that joins them in block.h.
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
#include "worker/engine/model/param.h"
#include "worker/engine/model/saved.h"

namespace moe::model {

// y = x @ w^T.   x [T, in], w [out, in] -> y [T, out], in x's dtype or in `out_dtype` (fp32 logits
// of bf16 activations).
Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype = std::nullopt);
// The same with a parameter: in FP8 when w.fp8 (ParamSet::Fp8Gemm under --precision fp8).
Tensor Linear(const Tensor& x, const Param& w);
// w.grad += dy^T @ x (in the gradient's dtype); returns dx = dy @ w.compute, in dy's dtype.
// FP8 when w.fp8, DeepSeek-V3's three GEMMs of a linear layer: each input quantised to e4m3 in
// tiles (activations and output gradients 1 x 128 along the reduction: x, dy in Fprop and Dgrad,
// 128 x 1 along the tokens in Wgrad; weights 128 x 128), then an fp32 GEMM of the dequantised
// values (the emulation kernels/fp8.h defines; fp32 accumulation), the result in the activations'
// dtype.
Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w);
// The tiles (DeepSeek-V3's): 1 x 128 for activations and gradients, 128 x 128 for weights.
inline constexpr int64_t kFp8Tile = 128;
// x quantised and dequantised in FP8 (f32, x's shape): tiles of tile_rows x tile_cols
// (Fp8QuantDequant).
Tensor Fp8View(const Tensor& x, int64_t tile_rows, int64_t tile_cols,
               const std::vector<int64_t>& row_groups = {});
// The three FP8 GEMMs of a linear layer with those tiles (w [N, K]; fp32 results): on CUDA
// cuBLASLt's block-scaled e4m3 GEMMs (kernels/fp8.h), on the CPU the emulation (Fp8View, then an
// fp32 GEMM).
//   Fp8Forward: y32 = x . w^T;   Fp8Dgrad: dx32 = dy . w;   Fp8Wgrad: dw += dy^T . x (dw in any
//   float dtype)
void Fp8Forward(const Tensor& x, const Tensor& w, const Tensor& y32);
void Fp8Dgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32);
void Fp8Wgrad(const Tensor& dy, const Tensor& x, const Tensor& dw);
// `t` in `dtype` (itself when it already is).
Tensor CastTo(const Tensor& t, DType dtype);

// Selective recompute (training.recompute): what a layer does not keep for its backward and
// computes again there. Results are bitwise those without recompute: the same kernels on the same
// inputs.
struct Recompute {
  bool core_attn = false;  // the attention core: only q, k, v kept
  bool mla_up_proj =
      false;         // MLA's up-projections (q from its latent, k_nope and v from the kv latent)
  bool mlp = false;  // the dense blocks' FFN: only its input kept
  bool moe_act = false;  // the routed experts' SwiGLU activation
  bool full = false;     // whole blocks: only each block's input kept
  // From the spec's names; INVALID_ARGUMENT for an unknown one.
  static Recompute From(const std::vector<std::string>& names);
};

class RmsNorm {
 public:
  RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed);
  Tensor Forward(const Tensor& x);
  // The residual add before the norm in the same pass: *sum = x + r (a new tensor), returns the
  // norm of *sum (kernels::AddRmsNormForward).
  Tensor AddForward(const Tensor& x, const Tensor& r, Tensor* sum);
  // dres, when given: the residual's gradient, added to dx in the same pass.
  Tensor Backward(const Tensor& dy, const Tensor& dres = Tensor());

 private:
  struct Saved {
    Tensor x, rstd;
  };
  Param* w_;
  double eps_;
  SavedQueue<Saved> saved_;
};

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)); gate and up fused in one [2F, h] weight.
class SwigluFfn {
 public:
  // recompute: keep only the input, compute gate|up and the activation again in Backward.
  SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn, uint64_t seed,
            double std, double out_std, bool recompute = false);
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

}  // namespace moe::model
