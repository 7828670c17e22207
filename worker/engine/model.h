// A DeepSeek-V3-style MoE transformer: embedding; blocks of (RMSNorm, attention with RoPE, residual,
// RMSNorm, dense SwiGLU FFN for the first `first_k_dense` layers or the MoE layer after, residual);
// final RMSNorm; untied output head; cross-entropy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/dispatcher.h"
#include "worker/engine/layers.h"
#include "worker/engine/param.h"

namespace moe {

struct MicroBatchResult {
  double ce_sum = 0;    // sum of token cross-entropies (nats) over the micro-batch
  double aux_loss = 0;  // balance loss contribution (already scaled to the global mean)
  int64_t tokens = 0;
  std::vector<std::vector<int64_t>> tokens_per_expert;  // [MoE layer][E], this micro-batch
};

class Model {
 public:
  // Builds and initialises every parameter from `seed`. `dtype` is the master weights' (f32 for
  // training, f64 for gradient checks); each rank holds the dense weights and its E/EP experts.
  // `compute_dtype` is the activations' and the weights' copies the layers read: bf16 for
  // mixed-precision training (fp32 master weights, gradients, optimizer state, routing and loss);
  // by default `dtype`.
  Model(const ModelConfig& cfg, const ParallelContext& par, uint64_t seed, DType dtype, Device device,
        double* alltoall_seconds = nullptr, std::optional<DType> compute_dtype = std::nullopt);

  // Forward and backward of one micro-batch; accumulates gradients into the parameters.
  //   tokens, targets: i32 [batch, seq_len] on the model's device
  //   ce_scale: multiplies d(ce_sum): 1 / (tokens in the global batch) gives the global mean loss
  //   aux_coeff: alpha / (sequences in the global batch)
  StatusOr<MicroBatchResult> ForwardBackward(const Tensor& tokens, const Tensor& targets, double ce_scale,
                                             double aux_coeff);
  // Forward only: ce_scale * ce_sum + aux loss (gradient checks, evaluation).
  StatusOr<double> Loss(const Tensor& tokens, const Tensor& targets, double ce_scale, double aux_coeff);

  ParamSet& params() { return params_; }
  const ModelConfig& config() const { return cfg_; }
  const std::vector<MoeLayer*>& moe_layers() const { return moe_layers_; }
  DType dtype() const { return dtype_; }
  DType compute_dtype() const { return compute_; }
  Device device() const { return device_; }

 private:
  struct Block {
    std::unique_ptr<RmsNorm> attn_norm, ffn_norm;
    std::unique_ptr<Attention> attn;
    std::unique_ptr<SwigluFfn> dense;
    std::unique_ptr<MoeLayer> moe;
  };
  StatusOr<double> Forward(const Tensor& tokens, const Tensor& targets, double ce_scale, double aux_coeff,
                           bool backward, MicroBatchResult* result);

  ModelConfig cfg_;
  DType dtype_;
  DType compute_;
  Device device_;
  ParamSet params_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  Param* embedding_;  // [V, h]
  std::vector<Block> blocks_;
  std::unique_ptr<RmsNorm> final_norm_;
  Param* head_;  // [V, h]
  std::vector<MoeLayer*> moe_layers_;
};

}  // namespace moe
