// The DeepSeek-V3 model: embedding; blocks of (RMSNorm, attention (MLA or MHA), residual, RMSNorm,
// dense SwiGLU FFN for the first `first_k_dense` blocks or the MoE layer after, residual); final
// RMSNorm; untied output head; cross-entropy; and D multi-token-prediction depths after the last
// block (docs/reference/deepseek-v3-architecture.md), sharing the embedding and the head.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/pipeline_layout.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/model/block.h"
#include "worker/engine/model/param.h"
#include "worker/engine/model/saved.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/dispatcher.h"

namespace moe::model {

// How a micro-batch's losses are scaled so that summing over micro-batches and ranks gives the
// global means: 1 / (positions in the global batch) for each cross-entropy.
struct LossScales {
  double ce = 0;  // main: 1 / (global sequences * seq_len)
  std::vector<double>
      mtp;  // depth k (1-based at index k-1): lambda / (D * global sequences * (seq_len - k))
  double aux_coeff = 0;  // alpha / (global sequences)
};

struct MicroBatchResult {
  double ce_sum = 0;  // sum of the main token cross-entropies (nats) over the micro-batch
  std::vector<double>
      mtp_ce_sums;      // [D] the same for each MTP depth (over its seq_len - k positions)
  double aux_loss = 0;  // balance loss contribution (already scaled to the global mean)
  int64_t tokens = 0;
  // [local MoE layer][E], this micro-batch (Model::moe_global_index maps them to the model's).
  std::vector<std::vector<int64_t>> tokens_per_expert;
  std::vector<int> moe_layer;  // [entry] the model-wide MoE index of each entry
  std::vector<Tensor>
      routing;  // [local MoE layer] i32 [T_layer, k]: the experts each token went to
};

struct ModelOptions {
  DType dtype = DType::kF32;  // master weights and gradients (f64 for gradient checks)
  Device device;
  std::optional<DType> compute;  // activations and the weights' copies (bf16: mixed precision)
  std::optional<DType> moments;  // AdamW moments (default: dtype; bf16 as DeepSeek-V3)
  bool fp8 = false;         // the linear layers' GEMMs in FP8 (--precision fp8; compute is bf16)
  int64_t max_seq_len = 0;  // the run's sequence length (YaRN applies above the original)
  Recompute recompute;      // what the layers compute again in the backward (training.recompute)
  bool materialized_attention = false;  // training.attention: materialized (CPU only)
  parallel::PhaseTimer* phases =
      nullptr;  // the MoE token all-to-all's spans (parallel/phase_timer.h)
  // The virtual pipeline stages this rank holds, in chunk order (common/pipeline_layout.h); empty:
  // the whole model as one chunk.
  std::vector<StageLayout> chunks;
};

class MtpDepth;

// Inference: one sequence's cache of past positions, one LayerKvCache per block.
struct DecodeCache {
  std::vector<LayerKvCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers[0].length; }
  int64_t capacity() const { return layers.empty() ? 0 : layers[0].rows.dim(0); }
  // Values each position keeps in each layer (MLA: kv_lora_rank + qk_rope_head_dim).
  int64_t values_per_layer() const { return layers.empty() ? 0 : layers[0].rows.dim(1); }
};

class Model {
 public:
  // Builds and initialises this rank's parameters from `seed`: the blocks of its pipeline chunks
  // (the embedding on the first stage, the head, final norm and MTP on the last, which also keeps a
  // copy of the embedding for MTP), dense weights in full and its E/EP experts. A parameter starts
  // from the same values whatever the layout.
  Model(const ModelConfig& cfg, const parallel::ParallelContext& par, uint64_t seed,
        const ModelOptions& options);
  // The same with positional options (tests and benchmarks).
  Model(const ModelConfig& cfg, const parallel::ParallelContext& par, uint64_t seed, DType dtype,
        Device device, parallel::PhaseTimer* phases = nullptr,
        std::optional<DType> compute_dtype = std::nullopt);
  ~Model();

  // The whole model on one rank (no pipeline): forward and backward of one micro-batch; accumulates
  // gradients into the parameters.
  //   tokens, targets: i32 [batch, seq_len] on the model's device (targets = tokens shifted by one)
  StatusOr<MicroBatchResult> ForwardBackward(const Tensor& tokens, const Tensor& targets,
                                             const LossScales& scales);
  // Forward only: the scaled total (main + MTP + balance), e.g. for gradient checks; `result`
  // (optional) receives the parts.
  StatusOr<double> Loss(const Tensor& tokens, const Tensor& targets, const LossScales& scales,
                        MicroBatchResult* result = nullptr);
  // Inference on one sequence, the whole model on this rank (pipeline_parallel 1), no MTP:
  // a cache for up to `capacity` positions (FAILED_PRECONDITION when the attention keeps none: an
  // MHA model decodes by running Loss over the whole prefix), and the logits [n, V] (master dtype,
  // on the model's device) of the sequence's next n positions given their tokens (i32 [n] on the
  // model's device), which join the cache.
  StatusOr<DecodeCache> NewDecodeCache(int64_t capacity) const;
  StatusOr<Tensor> Decode(const Tensor& tokens, DecodeCache& cache);
  // The main head's logits of the last forward-only pass ([batch * seq_len, V], fp32 or f64): what
  // Loss() computed (ForwardBackward keeps none: its head runs a chunk of rows at a time,
  // head_loss.h).
  const Tensor& last_logits() const { return last_logits_; }

  // The training step's losses on the device (the Trainer reads them once at the end of the step):
  // while `acc` is defined, passes with gradients add the main cross-entropy to acc[ce], the
  // balance losses to acc[aux] and MTP depth k's cross-entropy to acc[mtp + k - 1] instead of
  // returning them (MicroBatchResult's ce_sum, aux_loss and mtp_ce_sums stay 0). Forward-only
  // passes return theirs.
  struct DeviceLosses {
    Tensor acc;  // f64 on the model's device
    int64_t ce = 0, aux = 1, mtp = 2;
  };
  void SetDeviceLosses(DeviceLosses losses) { device_losses_ = std::move(losses); }

  // Pipeline stages. ForwardChunk runs chunk `c` on one micro-batch: `input` is the previous
  // stage's output [batch * seq_len, h] (unused on the first stage, which embeds `tokens`). It
  // returns the output for the next stage, or an undefined tensor on the last stage, whose losses
  // (and every chunk's MoE statistics) go into *result. BackwardChunk takes the gradient on that
  // output (undefined on the last stage) and returns the one on the input (undefined on the first
  // stage). A chunk's backwards run in the order of its forwards.
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const StageLayout& chunk_layout(int c) const;
  StatusOr<Tensor> ForwardChunk(int c, const Tensor& input, const Tensor& tokens,
                                const Tensor& targets, const LossScales& scales,
                                MicroBatchResult* result);
  StatusOr<Tensor> BackwardChunk(int c, const Tensor& output_grad);

  // The data-parallel reduction's overlap (Optimizer::SetOverlap): for the next
  // `backwards_per_chunk` backward passes of each chunk (a step's micro-batches), the last one
  // calls fn after each block's backward with that block's parameters, whose gradients are then
  // final for the step. Parameters outside the blocks (embedding, head, norms, MTP) are never
  // reported. An empty fn disarms.
  using GradsFinalFn = std::function<void(const std::vector<Param*>& params)>;
  void ArmGradsFinal(int64_t backwards_per_chunk, GradsFinalFn fn);

  ParamSet& params() { return params_; }
  const ModelConfig& config() const { return cfg_; }
  // This rank's MoE layers (the main model's in layer order, then the MTP depths'), and each one's
  // index among all the model's MoE layers (main layers first, then MTP depths).
  const std::vector<MoeLayer*>& moe_layers() const { return moe_layers_; }
  const std::vector<int>& moe_global_index() const { return moe_global_index_; }
  // The MoE layers of the whole model (every stage).
  int num_global_moe_layers() const;
  DType dtype() const { return dtype_; }
  DType compute_dtype() const { return compute_; }
  Device device() const { return device_; }
  bool mtp_trains() const { return cfg_.MtpTrains(); }

 private:
  struct Chunk;
  void BuildChunk(const StageLayout& layout, uint64_t seed, const ModelOptions& o,
                  const parallel::ParallelContext& par);
  void AddMoeLayer(MoeLayer* l, int global_index);
  Status LossForward(Chunk& c, const Tensor& h0, int64_t batch, int64_t seq,
                     const LossScales& scales, bool backward, MicroBatchResult* result);
  StatusOr<Tensor> LossBackward(Chunk& c);
  StatusOr<double> WholeModel(const Tensor& tokens, const Tensor& targets, const LossScales& scales,
                              bool backward, MicroBatchResult* result);

  ModelConfig cfg_;
  DType dtype_;
  DType compute_;
  Device device_;
  ParamSet params_;
  std::unique_ptr<parallel::TokenDispatcher> dispatcher_;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::vector<MoeLayer*> moe_layers_;
  std::vector<int> moe_global_index_;
  Tensor last_logits_;
  DeviceLosses device_losses_;
  GradsFinalFn grads_final_;
  int64_t backwards_armed_ = 0;
};

}  // namespace moe::model
