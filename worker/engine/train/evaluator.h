// Evaluation: the model forward only (no activations kept, no gradients, no bias update; routing as
// in training with the current bias) over given micro-batches, the losses summed over every rank of
// the job. Any layout gives the W = 1 value: data-parallel ranks each take their slice of a global
// batch, pipeline stages pass the activations along (one micro-batch at a time, stage after stage),
// and the sums travel in one all-reduce.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::train {

struct EvalResult {
  double loss = 0;  // mean next-token cross-entropy (nats) of the main head
  double mtp_loss =
      0;  // the mean over MTP depths of each depth's mean cross-entropy (0 without MTP)
  int64_t tokens = 0;  // predicted positions of the main head
  double ppl() const;
};

// Forward only: the scales weight gradients, which nothing computes; MTP needs one per depth.
model::LossScales ForwardOnlyScales(const model::Model& model);

class Evaluator {
 public:
  Evaluator(model::Model& model, const parallel::ParallelContext& par, int virtual_pipeline);

  // Runs one micro-batch forward (tokens, targets: i32 [batch, seq] on the model's device) and adds
  // its sums; every rank of the job calls it for its own micro-batches in the same order.
  Status Add(const Tensor& tokens, const Tensor& targets);
  // Collective: the sums over all ranks, as means.
  StatusOr<EvalResult> Finish();

 private:
  StatusOr<model::MicroBatchResult> PipelineForward(const Tensor& tokens, const Tensor& targets);

  model::Model& model_;
  const parallel::ParallelContext& par_;
  int virtual_pipeline_;
  double ce_sum_ = 0;
  int64_t tokens_ = 0;
  std::vector<double> mtp_sums_;
  std::vector<double> mtp_positions_;
};

// `batches` global batches of `sampler` (in order, from its first sample) at the job's data shape
// (seq_length, micro_batch_size, global_batch_size; this data-parallel rank's slice), evaluated.
// `seen` (optional) gets each micro-batch's host tokens and targets (i32 [micro_batch, seq]).
using EvalBatchFn = std::function<void(const Tensor& tokens, const Tensor& targets)>;
StatusOr<EvalResult> EvaluateBatches(model::Model& model, const parallel::ParallelContext& par,
                                     const JobSpec& spec, data::BatchSampler& sampler,
                                     int64_t batches, const EvalBatchFn& seen = nullptr);

}  // namespace moe::train
