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

namespace moe::model {

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

// Inference: what one attention layer keeps of a sequence's past positions. MLA keeps per token
// its normalised kv latent and its rotated shared key, kv_lora_rank + qk_rope_head_dim values
// (DeepSeek-V3's inference cache), not the heads' keys and values.
struct LayerKvCache {
  Tensor rows;         // [capacity, width] on the model's device, in the compute dtype
  int64_t length = 0;  // positions held: rows [0, length)
};

// Causal self-attention of a block: multi-head (MHA) or DeepSeek's multi-head latent (MLA).
class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  //   x [batch * seq_len, h] -> [batch * seq_len, h]
  virtual Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) = 0;
  virtual Tensor Backward(const Tensor& dy) = 0;
  // Values per position a decoding cache holds (0: this attention does not decode with a cache).
  virtual int64_t cache_width() const { return 0; }
  // Inference on one sequence: x [n, h] are its next n positions (cache.length onwards); each
  // attends to the cached positions and to itself and those before it; they are appended to
  // `cache`. -> [n, h]. Only where cache_width() > 0.
  virtual Tensor Decode(const Tensor& x, LayerKvCache& cache);
};

// The attention of `cfg` (mha or mla), its parameters named under `prefix`.
std::unique_ptr<AttentionLayer> MakeAttention(ParamSet& params, const std::string& prefix,
                                              const ModelConfig& cfg, uint64_t seed, double out_std,
                                              const AttentionContext& ctx);

}  // namespace moe::model
