// AdamW over a rank's parameters laid out in flat buffers per data-parallel group, with or without
// a distributed optimizer (ZeRO-1), the learning-rate schedule, and the gradient norm.
//
// Two buckets: the dense parameters, replicated over the stage's data-parallel group (DP ranks),
// and the routed experts, replicated over the expert-data-parallel group (DP / EP ranks). Each
// bucket holds its parameters' weights, compute copies and gradients contiguously (each Param's
// tensors become views into them), padded to a multiple of the group size. Then:
//   plain:       gradients all-reduced; every rank updates everything with full moments.
//   distributed: gradients reduce-scattered; rank i of the group owns elements [i n/g, (i+1) n/g)
//   of
//                the bucket: the fp32 master weights (when the compute copies are bf16) and both
//                AdamW moments exist only for that shard; after the update the compute copies are
//                all-gathered (bf16 on the wire in mixed precision, as Megatron's distributed
//                optimizer).
// Clipping uses the global norm over every shard of every rank (OwnedGradSquares, summed over the
// job).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/engine/checkpoint/checkpoint_io.h"
#include "worker/engine/model/param.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::train {

// Linear warmup to lr over warmup_steps (step 1 gets lr / warmup_steps), then cosine decay to
// min_lr at decay_steps; min_lr after. Steps are 1-based.
double LearningRate(const OptimizerConfig& o, int64_t decay_steps, int64_t step);

// Bytes one rank holds for its parameters, by what they are (memory accounting).
struct OptimizerBytes {
  int64_t weights = 0;  // master weights (all, or the shard) and compute copies
  int64_t gradients = 0;
  int64_t optimizer = 0;  // AdamW moments
};

class Optimizer final : public checkpoint::CheckpointedOptimizer {
 public:
  // Lays `params` out in flat buffers (rebinding each Param's value, compute, grad, m and v to
  // views, or leaving value, m and v undefined where the rank holds only a shard). `distributed`:
  // ZeRO-1. Groups: par.dp_group for dense parameters, par.expert_dp for experts (null: a group of
  // one). num_experts: the model's routed experts (an expert tensor's global first dimension).
  // deterministic: each bucket also gets an f64 gradient accumulator (Param::accum, GradSink) that
  // is what the groups reduce; its sum is rounded into the gradients once, after the reduction.
  Optimizer(const OptimizerConfig& cfg, model::ParamSet& params,
            const parallel::ParallelContext& par, bool distributed, int64_t num_experts,
            bool deterministic = false);
  ~Optimizer() override;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  bool distributed() const override { return distributed_; }
  // Whether the fp32 master weights exist only as this rank's shard (distributed mixed precision);
  // then Param::value is undefined and the checkpoint pieces of the values come from here.
  bool sharded_master() const;

  void ZeroGrads();
  // The reduction overlapped with the backward (Megatron's overlap_grad_reduce, PyTorch DDP's
  // buckets): each bucket whose group has more than one rank is cut, from its end (where the
  // backward's first gradients are), into spans of whole parameters of at least `span_bytes` of the
  // reduced buffer; a span's reduction starts (Communicator::Start*) as soon as the backward has
  // reported all its parameters final (GradsFinal), and ReduceGradients starts the others and
  // waits. 0: no spans: each bucket reduced in one piece by ReduceGradients.
  void SetOverlap(int64_t span_bytes);
  int64_t overlap_spans() const;  // over every bucket
  // The backward has finished these parameters' gradients for this step (none is reported twice).
  void GradsFinal(const std::vector<model::Param*>& params);
  // Sums the gradients over each bucket's group: all-reduce, or reduce-scatter into the shards (the
  // f64 accumulators when deterministic, then rounded into the gradients of what this rank
  // updates). With spans: starts those not started yet, in order, and waits for all.
  Status ReduceGradients();
  // acc[slot] += the squared gradient norm of what this rank owns (its shards; or, without ZeRO,
  // everything on the group's rank 0), tied copies left out, on the device (f64 acc on the
  // parameters' device; no host read): summed over all ranks it is the global norm squared.
  void OwnedGradSquaresInto(bool experts, const Tensor& acc, int64_t slot) const;
  // One AdamW update at `step` (1-based) with the norm left on the device: norm_sq (f64 [3] on the
  // parameters' device: the dense and expert squared global norms, a skip word) gives the clip
  // scale min(1, grad_clip / norm) in the AdamW kernels (kernels::ClipScale; the norm rounded to
  // fp32 when norm_fp32); a non-finite norm or a non-zero skip word leaves every parameter
  // unchanged. Then refreshes the compute copies (all-gathered under ZeRO).
  Status StepWithDeviceNorm(int64_t step, double lr, const Tensor& norm_sq, bool norm_fp32);
  // After a checkpoint restore wrote the weights: refresh the compute copies from a full master (a
  // sharded master and the compute copies are read separately).
  void WeightsChanged() override;

  // Checkpoint pieces of the optimizer state ("param/<name>/m|v") and, with a sharded master, of
  // the weights ("param/<name>/value"). writer: what this rank writes (its shards; without ZeRO the
  // group's rank 0 everything; tied copies never); reader: what it needs.
  void Pieces(bool writer, std::vector<checkpoint::TensorPiece>* out) const override;
  OptimizerBytes Bytes() const;

 private:
  struct Bucket;
  struct Span;
  void Build(Bucket& b);
  void StartSpan(Bucket& b, Span& span);
  void UpdateBucket(Bucket& b, const void* adamw_config);

  OptimizerConfig cfg_;
  model::ParamSet& params_;
  bool distributed_;
  int64_t num_experts_;
  bool deterministic_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::map<const model::Param*, std::pair<Bucket*, size_t>>
      span_of_;  // (bucket, span) of each parameter in a span
};

}  // namespace moe::train
