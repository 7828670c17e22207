// Runs one training step's pipeline schedule (pipeline_schedule.h) on this rank: the model chunks'
// forwards and backwards, and the activations and their gradients sent point to point to the
// neighbouring stages (Communicator::Exchange over the pipeline group: Gloo on CPU, NCCL on GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/pipeline_schedule.h"

namespace moe::train {

class PipelineRunner {
 public:
  // `par.pipeline` is the group of this rank's pipeline (member pp_rank()).
  PipelineRunner(model::Model& model, const parallel::ParallelContext& par, int virtual_pipeline);

  struct Timing {
    double exchange_seconds =
        0;  // waiting in (and moving data through) the point-to-point exchanges
  };
  // Runs the micro-batches' forwards and backwards in the schedule's order. tokens[i], targets[i]:
  // i32 [micro batch, seq_len] on the model's device. Each chunk forward's losses and MoE
  // statistics go to on_result.
  Status Run(const std::vector<Tensor>& tokens, const std::vector<Tensor>& targets,
             const model::LossScales& scales,
             const std::function<void(const model::MicroBatchResult&)>& on_result, Timing* timing);

 private:
  using Key = std::pair<int, int64_t>;  // (chunk, micro-batch)
  Status Exchange(const parallel::PipelineOp& op);
  static Tensor Take(std::map<Key, Tensor>* m, const parallel::PipeRef& r);

  model::Model& model_;
  const parallel::ParallelContext& par_;
  const int virtual_pipeline_;
  int64_t rows_ = 0;
  // Tensors between the ops: received inputs, outputs to send, received output gradients, input
  // gradients to send.
  std::map<Key, Tensor> inputs_, outputs_, grads_, input_grads_;
};

}  // namespace moe::train
