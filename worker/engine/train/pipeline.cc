#include "worker/engine/train/pipeline.h"

#include <chrono>

namespace moe::train {

PipelineRunner::PipelineRunner(model::Model& model, const parallel::ParallelContext& par,
                               int virtual_pipeline)
    : model_(model), par_(par), virtual_pipeline_(virtual_pipeline) {}

Tensor PipelineRunner::Take(std::map<Key, Tensor>* m, const parallel::PipeRef& r) {
  auto it = m->find({r.chunk, r.micro_batch});
  MOE_CHECK(it != m->end()) << "pipeline: no tensor for chunk " << r.chunk << " micro-batch "
                            << r.micro_batch;
  Tensor t = std::move(it->second);
  m->erase(it);
  return t;
}

// One batched exchange. Sends to a peer and receives from it are posted in a fixed order (the
// forward direction first), so with two stages, where "next" and "prev" are the same rank, each
// message meets the receive meant for it.
Status PipelineRunner::Exchange(const parallel::PipelineOp& op) {
  const int p = par_.pipeline_parallel, me = par_.pp_rank();
  const int next = (me + 1) % p, prev = (me - 1 + p) % p;
  const int64_t h = model_.config().hidden_size;
  std::vector<parallel::P2POp> ops;
  if (op.send_next) ops.push_back({parallel::P2POp::kSend, Take(&outputs_, *op.send_next), next});
  if (op.send_prev)
    ops.push_back({parallel::P2POp::kSend, Take(&input_grads_, *op.send_prev), prev});
  Tensor in, grad;
  if (op.recv_prev) {
    in = Tensor::Empty({rows_, h}, model_.compute_dtype(), model_.device());
    ops.push_back({parallel::P2POp::kRecv, in, prev});
  }
  if (op.recv_next) {
    grad = Tensor::Empty({rows_, h}, model_.compute_dtype(), model_.device());
    ops.push_back({parallel::P2POp::kRecv, grad, next});
  }
  MOE_RETURN_IF_ERROR(par_.pipeline->Exchange(ops));
  if (op.recv_prev) inputs_[{op.recv_prev->chunk, op.recv_prev->micro_batch}] = in;
  if (op.recv_next) grads_[{op.recv_next->chunk, op.recv_next->micro_batch}] = grad;
  return OkStatus();
}

Status PipelineRunner::Run(const std::vector<Tensor>& tokens, const std::vector<Tensor>& targets,
                           const model::LossScales& scales,
                           const std::function<void(const model::MicroBatchResult&)>& on_result,
                           Timing* timing) {
  const parallel::PipelineShape shape{par_.pipeline_parallel, virtual_pipeline_,
                                      static_cast<int64_t>(tokens.size())};
  rows_ = tokens.front().numel();
  inputs_.clear();
  outputs_.clear();
  grads_.clear();
  input_grads_.clear();
  const std::string phase = par_.pipeline->phase();
  for (const parallel::PipelineOp& op : BuildPipelineSchedule(shape, par_.pp_rank())) {
    const auto mb = static_cast<size_t>(op.compute.micro_batch);
    switch (op.kind) {
      case parallel::PipelineOp::Kind::kForward: {
        const StageLayout& layout = model_.chunk_layout(op.compute.chunk);
        const Tensor input = layout.embedding ? Tensor() : Take(&inputs_, op.compute);
        model::MicroBatchResult r;
        MOE_ASSIGN_OR_RETURN(Tensor out, model_.ForwardChunk(op.compute.chunk, input, tokens[mb],
                                                             targets[mb], scales, &r));
        if (out.defined()) outputs_[{op.compute.chunk, op.compute.micro_batch}] = out;
        on_result(r);
        break;
      }
      case parallel::PipelineOp::Kind::kBackward: {
        const StageLayout& layout = model_.chunk_layout(op.compute.chunk);
        const Tensor dout = layout.loss ? Tensor() : Take(&grads_, op.compute);
        MOE_ASSIGN_OR_RETURN(Tensor din, model_.BackwardChunk(op.compute.chunk, dout));
        if (din.defined()) input_grads_[{op.compute.chunk, op.compute.micro_batch}] = din;
        break;
      }
      case parallel::PipelineOp::Kind::kExchange: {
        const auto t0 = std::chrono::steady_clock::now();
        par_.pipeline->SetPhase(phase + ": pipeline " + OpString(op));
        MOE_RETURN_IF_ERROR(Exchange(op));
        timing->exchange_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        break;
      }
    }
  }
  par_.pipeline->SetPhase(phase);
  MOE_CHECK(inputs_.empty() && outputs_.empty() && grads_.empty() && input_grads_.empty())
      << "pipeline: tensors left over after the schedule";
  return OkStatus();
}

}  // namespace moe::train
