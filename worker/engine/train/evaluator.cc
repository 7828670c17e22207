#include "worker/engine/train/evaluator.h"

#include <algorithm>
#include <cmath>

#include "worker/engine/model/saved.h"

namespace moe::train {

double EvalResult::ppl() const { return std::exp(loss); }

model::LossScales ForwardOnlyScales(const model::Model& model) {
  model::LossScales s;
  s.ce = 1;
  s.mtp.assign(static_cast<size_t>(std::max<int64_t>(model.config().mtp_depth, 0)), 0.0);
  return s;
}

Evaluator::Evaluator(model::Model& model, const parallel::ParallelContext& par,
                     int virtual_pipeline)
    : model_(model), par_(par), virtual_pipeline_(virtual_pipeline) {}

// Virtual stage v runs on pipeline rank v % PP as its chunk v / PP; its output goes to the owner of
// v + 1 (the next rank) before that stage runs. Only the two ranks of a hand-over take part in it.
StatusOr<model::MicroBatchResult> Evaluator::PipelineForward(const Tensor& tokens,
                                                             const Tensor& targets) {
  const int pp = par_.pipeline_parallel, me = par_.pp_rank();
  const int stages = pp * virtual_pipeline_;
  const int64_t rows = tokens.numel(), h = model_.config().hidden_size;
  model::MicroBatchResult result;
  Tensor carried;  // the input of the stage this rank runs next
  for (int v = 0; v < stages; ++v) {
    const int owner = v % pp;
    Tensor out;
    if (owner == me) {
      model::MicroBatchResult r;
      MOE_ASSIGN_OR_RETURN(out, model_.ForwardChunk(v / pp, carried, tokens, targets,
                                                    ForwardOnlyScales(model_), &r));
      result.ce_sum += r.ce_sum;
      result.tokens += r.tokens;
      if (result.mtp_ce_sums.size() < r.mtp_ce_sums.size())
        result.mtp_ce_sums.resize(r.mtp_ce_sums.size(), 0.0);
      for (size_t k = 0; k < r.mtp_ce_sums.size(); ++k) result.mtp_ce_sums[k] += r.mtp_ce_sums[k];
      carried = Tensor();
    }
    if (v + 1 == stages) break;
    const int next_owner = (v + 1) % pp;
    if (owner == me) {
      MOE_RETURN_IF_ERROR(par_.pipeline->Exchange({{parallel::P2POp::kSend, out, next_owner}}));
    } else if (next_owner == me) {
      carried = Tensor::Empty({rows, h}, model_.compute_dtype(), model_.device());
      MOE_RETURN_IF_ERROR(par_.pipeline->Exchange({{parallel::P2POp::kRecv, carried, owner}}));
    }
  }
  return result;
}

Status Evaluator::Add(const Tensor& tokens, const Tensor& targets) {
  model::NoGradScope no_grad;
  model::MicroBatchResult r;
  if (par_.pipeline_parallel > 1) {
    MOE_ASSIGN_OR_RETURN(r, PipelineForward(tokens, targets));
  } else {
    MOE_RETURN_IF_ERROR(model_.Loss(tokens, targets, ForwardOnlyScales(model_), &r).status());
  }
  ce_sum_ += r.ce_sum;
  tokens_ += r.tokens;
  const int64_t batch = tokens.dim(0), seq = tokens.dim(1);
  if (mtp_sums_.size() < r.mtp_ce_sums.size()) {
    mtp_sums_.resize(r.mtp_ce_sums.size(), 0.0);
    mtp_positions_.resize(r.mtp_ce_sums.size(), 0.0);
  }
  for (size_t k = 0; k < r.mtp_ce_sums.size(); ++k) {
    mtp_sums_[k] += r.mtp_ce_sums[k];
    mtp_positions_[k] += static_cast<double>(batch * (seq - static_cast<int64_t>(k) - 1));
  }
  return OkStatus();
}

StatusOr<EvalResult> Evaluator::Finish() {
  // Every rank packs the same length: the model's MTP depths (zeros where this rank computed none).
  const size_t depths = model_.mtp_trains() ? static_cast<size_t>(model_.config().mtp_depth) : 0;
  mtp_sums_.resize(depths, 0.0);
  mtp_positions_.resize(depths, 0.0);
  std::vector<double> packed = {ce_sum_, static_cast<double>(tokens_)};
  packed.insert(packed.end(), mtp_sums_.begin(), mtp_sums_.end());
  packed.insert(packed.end(), mtp_positions_.begin(), mtp_positions_.end());
  if (par_.world != nullptr && par_.world->size() > 1) {
    MOE_RETURN_IF_ERROR(
        par_.world->AllReduceSumHost(packed.data(), static_cast<int64_t>(packed.size())));
  }
  EvalResult out;
  out.tokens = static_cast<int64_t>(packed[1]);
  if (out.tokens == 0) return FailedPreconditionError("evaluation: no tokens were evaluated");
  out.loss = packed[0] / packed[1];
  for (size_t k = 0; k < depths; ++k) {
    out.mtp_loss += packed[2 + k] / packed[2 + depths + k] / static_cast<double>(depths);
  }
  ce_sum_ = 0;
  tokens_ = 0;
  mtp_sums_.clear();
  mtp_positions_.clear();
  return out;
}

StatusOr<EvalResult> EvaluateBatches(model::Model& model, const parallel::ParallelContext& par,
                                     const JobSpec& spec, data::BatchSampler& sampler,
                                     int64_t batches, const EvalBatchFn& seen) {
  const int64_t gbs = spec.data.global_batch_size, mbs = spec.data.micro_batch_size,
                seq = spec.data.seq_length;
  const int64_t per_rank = gbs / par.dp_size();
  Evaluator eval(model, par, static_cast<int>(spec.parallelism.virtual_pipeline));
  Tensor tokens = Tensor::Empty({mbs, seq}, DType::kI32),
         targets = Tensor::Empty({mbs, seq}, DType::kI32);
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t m = 0; m < per_rank / mbs; ++m) {
      sampler.MicroBatch(b * gbs, per_rank, par.dp_rank(), m, tokens.data<int32_t>(),
                         targets.data<int32_t>());
      if (seen) seen(tokens, targets);
      const Device dev = model.device();
      MOE_RETURN_IF_ERROR(eval.Add(dev.is_cpu() ? tokens : tokens.Clone(dev),
                                   dev.is_cpu() ? targets : targets.Clone(dev)));
    }
  }
  return eval.Finish();
}

}  // namespace moe::train
