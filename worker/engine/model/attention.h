// Causal self-attention of a block: multi-head (MHA) or DeepSeek's multi-head latent (MLA), with
// what it keeps for the backward and what it recomputes (attention.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "kernels/tensor.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/model/param.h"

namespace moe {

// What the attention layers share: the run's shape, where their constants live, what they
// recompute.
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
std::unique_ptr<AttentionLayer> MakeAttention(ParamSet& params, const std::string& prefix,
                                              const ModelConfig& cfg, uint64_t seed, double out_std,
                                              const AttentionContext& ctx);

}  // namespace moe
