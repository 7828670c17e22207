// The DeepSeek-V3 model: embedding; blocks of (RMSNorm, attention (MLA or MHA), residual, RMSNorm, dense
// SwiGLU FFN for the first `first_k_dense` blocks or the MoE layer after, residual); final RMSNorm;
// untied output head; cross-entropy; and D multi-token-prediction depths after the last block
// (../shared/reference/deepseek-v3-architecture.md), sharing the embedding and the head.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/dispatcher.h"
#include "worker/engine/layers.h"
#include "worker/engine/param.h"
#include "worker/engine/saved.h"

namespace moe {

// How a micro-batch's losses are scaled so that summing over micro-batches and ranks gives the
// global means: 1 / (positions in the global batch) for each cross-entropy.
struct LossScales {
  double ce = 0;                // main: 1 / (global sequences * seq_len)
  std::vector<double> mtp;      // depth k (1-based at index k-1): lambda / (D * global sequences * (seq_len - k))
  double aux_coeff = 0;         // alpha / (global sequences)
};

struct MicroBatchResult {
  double ce_sum = 0;                  // sum of the main token cross-entropies (nats) over the micro-batch
  std::vector<double> mtp_ce_sums;    // [D] the same for each MTP depth (over its seq_len - k positions)
  double aux_loss = 0;                // balance loss contribution (already scaled to the global mean)
  int64_t tokens = 0;
  std::vector<std::vector<int64_t>> tokens_per_expert;  // [MoE layer][E], this micro-batch
  std::vector<Tensor> routing;        // [MoE layer] i32 [T_layer, k]: the experts each token went to
};

struct ModelOptions {
  DType dtype = DType::kF32;          // master weights and gradients (f64 for gradient checks)
  Device device;
  std::optional<DType> compute;       // activations and the weights' copies (bf16: mixed precision)
  std::optional<DType> moments;       // AdamW moments (default: dtype; bf16 as DeepSeek-V3)
  int64_t max_seq_len = 0;            // the run's sequence length (YaRN applies above the original)
  Recompute recompute;                // what the layers compute again in the backward (training.recompute)
  double* alltoall_seconds = nullptr; // the MoE token all-to-all adds its time here
};

class MtpDepth;

class Model {
 public:
  // Builds and initialises every parameter from `seed`; each rank holds the dense weights and its E/EP
  // experts.
  Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, const ModelOptions& options);
  // The same with positional options (tests and benchmarks).
  Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, DType dtype, Device device,
        double* alltoall_seconds = nullptr, std::optional<DType> compute_dtype = std::nullopt);
  ~Model();

  // Forward and backward of one micro-batch; accumulates gradients into the parameters.
  //   tokens, targets: i32 [batch, seq_len] on the model's device (targets = tokens shifted by one)
  StatusOr<MicroBatchResult> ForwardBackward(const Tensor& tokens, const Tensor& targets, const LossScales& scales);
  // Forward only: the scaled total (main + MTP + balance), e.g. for gradient checks; `result` (optional)
  // receives the parts.
  StatusOr<double> Loss(const Tensor& tokens, const Tensor& targets, const LossScales& scales,
                        MicroBatchResult* result = nullptr);
  // The main head's logits of the last forward-only pass ([batch * seq_len, V], fp32 or f64): what
  // Loss() computed (ForwardBackward turns its logits into their gradient).
  const Tensor& last_logits() const { return last_logits_; }

  ParamSet& params() { return params_; }
  const ModelConfig& config() const { return cfg_; }
  // Every MoE layer: the main model's, then the MTP depths' (when they train).
  const std::vector<MoeLayer*>& moe_layers() const { return moe_layers_; }
  DType dtype() const { return dtype_; }
  DType compute_dtype() const { return compute_; }
  Device device() const { return device_; }
  bool mtp_trains() const { return !mtp_.empty(); }

 private:
  StatusOr<double> Forward(const Tensor& tokens, const Tensor& targets, const LossScales& scales, bool backward,
                           MicroBatchResult* result);
  // The main model's hidden states before the final norm: [batch * seq_len, h].
  StatusOr<Tensor> ForwardBlocks(const Tensor& ids, int64_t batch, int64_t seq, double aux_coeff, MicroBatchResult* r);
  StatusOr<Tensor> BackwardBlocks(Tensor dx, const Tensor& ids);
  Status Backward();

  ModelConfig cfg_;
  DType dtype_;
  DType compute_;
  Device device_;
  ParamSet params_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  Param* embedding_;  // [V, h]
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<RmsNorm> final_norm_;
  Param* head_;  // [V, h]
  std::vector<std::unique_ptr<MtpDepth>> mtp_;
  std::vector<MoeLayer*> moe_layers_;
  // What the backward of one micro-batch needs.
  struct Saved {
    Tensor ids, logits, hn;
  };
  SavedQueue<Saved> saved_;
  Tensor last_logits_;
};

}  // namespace moe
