// The trainer's run and its step: forward and backward (with or without the pipeline), the gradient
// reduction, the update, the step's metrics, evaluation and reports. Its setup is in
// trainer_setup.cc, its checkpoints in trainer_checkpoint.cc.
#include "worker/engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <new>
#include <thread>

#include "common/file_util.h"
#include "common/flops.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/memory_stats.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/async_checkpoint.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/step_profile.h"
#include "worker/engine/train/evaluator.h"
#include "worker/engine/train/optimizer.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/pipeline.h"
#include "worker/engine/train/trainer_internal.h"

namespace moe::train {
namespace {

using internal::Clock;
using internal::Since;

// max / mean tokens per expert (0 when the layer saw no tokens).
double Imbalance(const std::vector<double>& counts) {
  double mx = 0, sum = 0;
  for (double c : counts) {
    mx = std::max(mx, c);
    sum += c;
  }
  return sum > 0 ? mx / (sum / static_cast<double>(counts.size())) : 0;
}

}  // namespace

std::vector<double> StepStats::Pack() const {
  std::vector<double> out = {ce_sum, aux_loss, pipeline_bubble};
  out.insert(out.end(), mtp_ce_sums.begin(), mtp_ce_sums.end());
  for (const auto& layer : tokens_per_expert) out.insert(out.end(), layer.begin(), layer.end());
  return out;
}

void StepStats::Add(const model::MicroBatchResult& mb) {
  ce_sum += mb.ce_sum;
  aux_loss += mb.aux_loss;
  for (size_t k = 0; k < mb.mtp_ce_sums.size(); ++k) mtp_ce_sums[k] += mb.mtp_ce_sums[k];
  for (size_t i = 0; i < mb.tokens_per_expert.size(); ++i) {
    std::vector<double>& layer = tokens_per_expert[static_cast<size_t>(mb.moe_layer[i])];
    for (size_t e = 0; e < layer.size(); ++e)
      layer[e] += static_cast<double>(mb.tokens_per_expert[i][e]);
  }
}

void StepStats::Unpack(const std::vector<double>& packed) {
  ce_sum = packed[0];
  aux_loss = packed[1];
  pipeline_bubble = packed[2];
  size_t i = 3;
  for (double& c : mtp_ce_sums) c = packed[i++];
  for (auto& layer : tokens_per_expert) {
    for (double& c : layer) c = packed[i++];
  }
}

Trainer::Trainer(const JobSpec& spec, const parallel::ParallelContext& par,
                 const TrainerOptions& options)
    : spec_(spec),
      par_(par),
      options_(options),
      lead_(par.rank == 0),
      stop_step_(options.stop_at_step > 0 ? options.stop_at_step : spec.training.steps) {}

Trainer::~Trainer() = default;

StatusOr<TrainResult> Trainer::Run() {
  LogSetup();
  result_.device = place_.name;
  result_.precision = place_.precision;
  result_.peak_source = peak_source_;
  if (start_step_ >= stop_step_) {
    result_.first_step = result_.last_step = start_step_;
    if (checkpoints_) result_.checkpoint_step = start_step_;
    if (lead_)
      MOE_LOG(INFO) << "nothing to do: the checkpoint is at step " << start_step_
                    << ", the run stops at " << stop_step_;
    return result_;
  }
  if (lead_ && !options_.metrics_out.empty()) {
    metrics_file_.open(options_.metrics_out, options_.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_file_)
      return UnavailableError("cannot open --metrics-out file '" + options_.metrics_out + "'");
  }
  OpenHistory();
  result_.first_step = start_step_ + 1;
  for (int64_t step = start_step_ + 1; step <= stop_step_; ++step) {
    MOE_ASSIGN_OR_RETURN(const bool stop, AgreeToStop(step));
    if (stop) {
      if (options_.on_protected)
        options_.on_protected(true);  // every rank, also one not signalled yet
      result_.stopped_early = true;
      if (lead_) MOE_LOG(INFO) << "stopping before step " << step << " (asked to stop)";
      MOE_RETURN_IF_ERROR(CheckpointOnStop(step - 1));
      break;
    }
    MOE_RETURN_IF_ERROR(Step(step));
  }
  if (checkpoints_) result_.checkpoint_step = std::max(last_checkpoint_step_, start_step_);
  if (measured_ > 0) {
    const double n = static_cast<double>(measured_);
    result_.mean_tokens_per_second = sum_tps_ / n;
    result_.mean_tflops_per_device = sum_tflops_ / n;
    result_.mean_mfu = sum_mfu_ / n;
  }
  return result_;
}

model::LossScales Trainer::ScalesFor(const StepStats& stats) const {
  const double gbs = static_cast<double>(stats.global_batch),
               seq = static_cast<double>(spec_.data.seq_length);
  model::LossScales s;
  s.ce = 1.0 / (gbs * seq);
  s.aux_coeff = spec_.model.moe.seq_aux_loss_coeff / gbs;
  const double depth = static_cast<double>(spec_.model.mtp_depth);
  for (int64_t k = 1; k <= spec_.model.mtp_depth; ++k) {
    s.mtp.push_back(stats.mtp_loss_weight / (depth * gbs * (seq - static_cast<double>(k))));
  }
  return s;
}

// Every rank must stop at the same step boundary, or the others would wait in the next step's
// collectives: the ranks agree by summing their flags.
StatusOr<bool> Trainer::AgreeToStop(int64_t step) {
  if (!options_.should_stop) return false;
  double votes = options_.should_stop() ? 1.0 : 0.0;
  par_.world->SetPhase("step " + std::to_string(step) + ": stop agreement");
  MOE_RETURN_IF_ERROR(par_.world->AllReduceSumHost(&votes, 1));
  return votes > 0;
}

void Trainer::PlanStep(int64_t step, StepStats* stats) const {
  int64_t samples = 0;
  if (spec_.data.batch_ramp.start == 0) {
    samples = (step - 1) * spec_.data.global_batch_size;
  } else {
    for (int64_t s = 1; s < step; ++s)
      samples += spec_.GlobalBatchAt(static_cast<double>(samples * spec_.data.seq_length));
  }
  stats->tokens_before = static_cast<double>(samples * spec_.data.seq_length);
  stats->global_batch = spec_.GlobalBatchAt(stats->tokens_before);
  stats->mtp_loss_weight = spec_.model.MtpLossWeight(stats->tokens_before);
  stats->bias_update_rate = spec_.model.moe.BiasUpdateRate(stats->tokens_before);
}

Status Trainer::Step(int64_t step) {
  const auto t0 = Clock::now();
  const int64_t syncs0 = kernels::HostSyncs();
  const std::string phase = "step " + std::to_string(step);
  par_.world->SetPhase(phase);
  if (par_.ep_group) par_.ep_group->SetPhase(phase + ": MoE token all-to-all");
  // The gradients' groups have communicators of their own (process_group.h); their reductions start
  // during the backward (Optimizer::SetOverlap) and the ZeRO all-gather follows the update.
  for (parallel::Communicator* g : {par_.dp_group, par_.expert_dp}) {
    if (g != nullptr) g->SetPhase(phase + ": gradient reduction");
  }
  StepStats stats;
  // Everything the step allocates is an activation or a temporary unless a narrower scope says
  // otherwise (the all-to-all staging); the peak starts from what is live before the step (weights,
  // optimizer).
  MemoryScope activations(MemoryCategory::kActivations);
  const int device_type = static_cast<int>(place_.device.type);
  ResetPeakMemory(device_type);
  phases_->Begin(parallel::PhaseTimer::kForwardBackward);
  PlanStep(step, &stats);
  MOE_RETURN_IF_ERROR(ForwardBackward(step, &stats));
  phases_->End(parallel::PhaseTimer::kForwardBackward);
  par_.world->SetPhase(phase + ": gradient all-reduce");
  phases_->Begin(parallel::PhaseTimer::kGradSync);
  {
    parallel::ProfilePhase reduce("gradient reduction");
    MOE_RETURN_IF_ERROR(ReduceGradients());
  }
  phases_->End(parallel::PhaseTimer::kGradSync);
  if (step ==
      options_.inject_nonfinite_grad_step) {  // a non-finite norm, as an overflow would leave it
    step_acc_.Rows(kDenseSqSlot, kDenseSqSlot + 1)
        .CopyFrom(Tensor::FromVector<double>({std::nan("")}, {1}));
  }
  {
    parallel::ProfilePhase update("optimizer");
    MOE_RETURN_IF_ERROR(Update(step, &stats));
    update.Switch("step statistics, bias update");
    MOE_RETURN_IF_ERROR(FinishStep(step, &stats));  // its read waits for the step's queued kernels
  }
  // Past the read, the device has passed every mark: the phases' device times (host on the CPU).
  const parallel::PhaseTimer::Seconds spans = phases_->Resolve();
  stats.forward_backward_seconds = spans.forward_backward;
  stats.alltoall_seconds = spans.alltoall;
  stats.grad_sync_seconds = spans.grad_sync;
  stats.step_seconds = Since(t0);
  stats.host_syncs = kernels::HostSyncs() - syncs0;
  stats.memory = GetMemoryUsage(device_type);
  StepMetrics m = Metrics(step, stats);
  m.checkpoint_stall_seconds = checkpoint_stall_;  // the saves since the previous report
  checkpoint_stall_ = 0;
  MOE_RETURN_IF_ERROR(MaybeEvaluate(step, &m));
  MOE_RETURN_IF_ERROR(Report(m));
  return MaybeCheckpoint(step, m);
}

// Data and forward/backward over this rank's micro-batches. Each micro-batch's loss is scaled by
// 1 / (tokens in the global batch), so the summed gradients are the global mean loss's.
Status Trainer::ForwardBackward(int64_t step, StepStats* stats) {
  (void)step;  // the data position is the samples consumed before the step (PlanStep)
  const auto t0 = Clock::now();
  const int64_t gbs = stats->global_batch, seq = spec_.data.seq_length,
                mbs = spec_.data.micro_batch_size;
  const model::LossScales scales = ScalesFor(*stats);
  const size_t n_moe = static_cast<size_t>(model_->num_global_moe_layers());
  stats->tokens_per_expert.assign(
      n_moe, std::vector<double>(static_cast<size_t>(spec_.model.moe.num_experts), 0.0));
  stats->mtp_ce_sums.assign(model_->mtp_trains() ? static_cast<size_t>(spec_.model.mtp_depth) : 0,
                            0.0);
  optimizer_->ZeroGrads();
  step_acc_.SetZero();
  // Each data-parallel rank takes gbs / DP consecutive samples of the global batch, in
  // micro-batches.
  const int64_t per_rank = gbs / par_.dp_size(),
                first = static_cast<int64_t>(stats->tokens_before) / seq;
  // The last micro-batch's backward hands each block's finished gradients to the reduction.
  model_->ArmGradsFinal(
      per_rank / mbs, [this](const std::vector<model::Param*>& ps) { optimizer_->GradsFinal(ps); });
  if (par_.pipeline_parallel > 1) {
    MOE_RETURN_IF_ERROR(PipelineForwardBackward(per_rank / mbs, first, scales, stats));
  } else {
    for (int64_t m = 0; m < per_rank / mbs; ++m) {
      sampler_->MicroBatch(first, per_rank, par_.dp_rank(), m, tokens_.data<int32_t>(),
                           targets_.data<int32_t>());
      if (place_.device.is_cuda()) {
        parallel::ProfilePhase copy("data to the device");
        tokens_dev_.CopyFrom(tokens_);
        targets_dev_.CopyFrom(targets_);
      }
      MOE_ASSIGN_OR_RETURN(model::MicroBatchResult mb,
                           model_->ForwardBackward(tokens_dev_, targets_dev_, scales));
      stats->Add(mb);
    }
  }
  model_->ArmGradsFinal(0, nullptr);
  if (options_.inject_step_delay > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.inject_step_delay));
  // No device sync here (the step's budget is one read, at its end): the phases' times are device
  // marks on a GPU (phases_), read after that read; `seconds` below is the host's queueing.
  const double seconds = Since(t0);
  stats->pipeline_bubble = seconds > 0 ? stats->pipeline_bubble / seconds : 0;
  return OkStatus();
}

// Every stage reads every micro-batch of its data-parallel rank (the first stage embeds the tokens,
// the last needs the targets and, for MTP, the tokens again); then the schedule runs.
Status Trainer::PipelineForwardBackward(int64_t micro_batches, int64_t first_sample,
                                        const model::LossScales& scales, StepStats* stats) {
  const int64_t mbs = spec_.data.micro_batch_size;
  std::vector<Tensor> tokens, targets;
  for (int64_t m = 0; m < micro_batches; ++m) {
    sampler_->MicroBatch(first_sample, micro_batches * mbs, par_.dp_rank(), m,
                         tokens_.data<int32_t>(), targets_.data<int32_t>());
    tokens.push_back(tokens_.Clone(place_.device));
    targets.push_back(targets_.Clone(place_.device));
  }
  PipelineRunner runner(*model_, par_, static_cast<int>(spec_.parallelism.virtual_pipeline));
  PipelineRunner::Timing timing;
  MOE_RETURN_IF_ERROR(runner.Run(
      tokens, targets, scales, [stats](const model::MicroBatchResult& r) { stats->Add(r); },
      &timing));
  stats->pipeline_bubble = timing.exchange_seconds;  // a fraction after ForwardBackward divides it
  return OkStatus();
}

// Gradients: the embedding's over the first and last stage (MTP's copy), then over the
// data-parallel groups (all-reduce, or reduce-scatter into the ZeRO shards); then the squared norms
// of what each rank owns, added on the device and summed over all ranks there (the statistics
// follow in FinishStep).
Status Trainer::ReduceGradients() {
  if (tied_embedding_ && par_.embedding != nullptr && par_.embedding->size() > 1) {
    model::Param* e = model_->params().Find("embedding");
    MOE_CHECK(e != nullptr) << "the first and last stage hold the embedding";
    MOE_RETURN_IF_ERROR(par_.embedding->AllReduceSum(e->accum.defined() ? e->accum : e->grad));
  }
  MOE_RETURN_IF_ERROR(optimizer_->ReduceGradients());
  optimizer_->OwnedGradSquaresInto(false, step_acc_, kDenseSqSlot);
  optimizer_->OwnedGradSquaresInto(true, step_acc_, kExpertSqSlot);
  // The bounds checks' bits: this rank's kept, a copy summed over the ranks with the squares, so
  // that a bad batch anywhere skips the update everywhere and every rank fails the step alike.
  kernels::FoldBadIndices(step_acc_, kBadIndexSlot);
  step_acc_.Rows(kBadSumSlot, kBadSumSlot + 1)
      .CopyFrom(step_acc_.Rows(kBadIndexSlot, kBadIndexSlot + 1));
  if (par_.world_size > 1)
    MOE_RETURN_IF_ERROR(par_.world->AllReduceSum(step_acc_.Rows(kDenseSqSlot, kBadSumSlot + 1)));
  return OkStatus();
}

// Clipping on the global norm and AdamW, the norm read on the device (kernels::ClipScale); a
// non-finite norm skips the update there. The squares are summed shard by shard, in an order that
// depends on the layout: deterministic training clips by the norm rounded to fp32, which a last-bit
// difference almost never moves.
Status Trainer::Update(int64_t step, StepStats* stats) {
  stats->lr = spec_.optimizer.lr_schedule.empty()
                  ? LearningRate(spec_.optimizer, spec_.decay_steps(), step)
                  : ScheduleValue(spec_.optimizer.lr_schedule, stats->tokens_before, 0);
  return optimizer_->StepWithDeviceNorm(
      step, stats->lr, step_acc_.Rows(kDenseSqSlot, kBadSumSlot + 1), deterministic_);
}

Status Trainer::BadIndexStatus(double local_bits, double any_rank, const std::string& when) const {
  if (local_bits != 0) {  // the batch, not the device
    return FailedPreconditionError(
        when + ": the batch held " + kernels::BadIndexMessage(static_cast<unsigned>(local_bits)) +
        " (device-side bounds checks: nothing was read out of bounds, no update was made); "
        "check the dataset against spec.model.vocab_size");
  }
  if (any_rank != 0) {
    return FailedPreconditionError(
        when +
        ": another rank's batch held indices out of range (its log names them); no "
        "update was made");
  }
  return OkStatus();
}

Status Trainer::FinishStep(int64_t step, StepStats* stats) {
  CountCpuStandInRead(step_acc_);
  const std::vector<double> acc = step_acc_.ToVector<double>();
  MOE_RETURN_IF_ERROR(
      BadIndexStatus(acc[kBadIndexSlot], acc[kBadSumSlot], "step " + std::to_string(step)));
  stats->ce_sum += acc[kCeSlot];
  stats->aux_loss += acc[kAuxSlot];
  for (size_t k = 0; k < stats->mtp_ce_sums.size(); ++k)
    stats->mtp_ce_sums[k] += acc[static_cast<size_t>(kMtpSlot) + k];
  std::vector<double> packed = stats->Pack();
  MOE_RETURN_IF_ERROR(
      par_.world->AllReduceSumHost(packed.data(), static_cast<int64_t>(packed.size())));
  stats->Unpack(packed);
  stats->pipeline_bubble /= static_cast<double>(par_.world_size);
  stats->dense_sq = acc[kDenseSqSlot];  // already summed over the ranks
  stats->expert_sq = acc[kExpertSqSlot];
  stats->grad_norm = std::sqrt(stats->dense_sq + stats->expert_sq);
  if (deterministic_) stats->grad_norm = static_cast<float>(stats->grad_norm);
  if (!std::isfinite(stats->grad_norm)) {
    stats->update_skipped = true;
    if (lead_)
      MOE_LOG(WARNING) << "step " << step << ": gradient norm is " << stats->grad_norm
                       << "; update skipped";
  }
  UpdateBias(*stats);
  return OkStatus();
}

// Aux-loss-free balancing from the step's global token counts; not on a step whose update was
// skipped (its routing came from weights that did not move).
void Trainer::UpdateBias(const StepStats& stats) {
  const double rate = stats.bias_update_rate;
  if (rate <= 0 || stats.update_skipped || !spec_.model.moe.has_bias()) return;
  for (size_t l = 0; l < model_->moe_layers().size(); ++l) {
    model_->moe_layers()[l]->UpdateBias(
        stats.tokens_per_expert[static_cast<size_t>(model_->moe_global_index()[l])], rate);
  }
}

StepMetrics Trainer::Metrics(int64_t step, const StepStats& stats) const {
  StepMetrics m;
  for (const auto& counts : stats.tokens_per_expert) {
    const double imb = Imbalance(counts);
    m.expert_load_imbalance_per_layer.push_back(imb);
    m.expert_load_imbalance = std::max(m.expert_load_imbalance, imb);
  }
  m.step = step;
  m.total_steps = stop_step_;
  const int64_t seq = spec_.data.seq_length;
  m.tokens = stats.global_batch * seq;
  m.loss = stats.ce_sum / static_cast<double>(m.tokens);
  // The MTP loss as reported: the mean over depths of each depth's mean cross-entropy (unweighted,
  // so it compares with the main loss); the objective adds lambda times it.
  for (size_t k = 0; k < stats.mtp_ce_sums.size(); ++k) {
    const double positions =
        static_cast<double>(stats.global_batch * (seq - static_cast<int64_t>(k) - 1));
    m.mtp_loss += stats.mtp_ce_sums[k] / positions / static_cast<double>(stats.mtp_ce_sums.size());
  }
  m.mtp_loss_weight = stats.mtp_ce_sums.empty() ? 0 : stats.mtp_loss_weight;
  m.aux_loss = stats.aux_loss;
  m.lr = stats.lr;
  m.grad_norm = stats.grad_norm;
  m.step_seconds = stats.step_seconds;
  m.tokens_per_second = static_cast<double>(m.tokens) / m.step_seconds;
  m.tflops_per_device = TflopsPerDevice(MegatronFlopsPerStep(spec_.model, stats.global_batch, seq),
                                        m.step_seconds, par_.world_size);
  m.peak_tflops = peak_flops_ / 1e12;
  m.peak_source = peak_source_;
  m.mfu = m.peak_tflops > 0 ? m.tflops_per_device / m.peak_tflops : 0;
  m.alltoall_seconds = stats.alltoall_seconds;
  m.compute_seconds = stats.forward_backward_seconds - stats.alltoall_seconds;
  m.grad_sync_seconds = stats.grad_sync_seconds;
  m.host_syncs = stats.host_syncs;
  m.pipeline_bubble = stats.pipeline_bubble;
  m.memory_peak_bytes = stats.memory.peak;
  m.checkpoint_step = std::max(last_checkpoint_step_, start_step_);
  for (size_t c = 0; c < kNumMemoryCategories; ++c) {
    m.memory_at_peak.emplace_back(MemoryCategoryName(static_cast<MemoryCategory>(c)),
                                  stats.memory.at_peak[c]);
  }
  m.consumed_samples = static_cast<int64_t>(stats.tokens_before) / seq + stats.global_batch;
  m.world_size = par_.world_size;
  m.rank = par_.rank;
  return m;
}

Status Trainer::MaybeEvaluate(int64_t step, StepMetrics* m) {
  const int64_t every = spec_.training.eval_interval;
  if (every <= 0 || (step % every != 0 && step != stop_step_)) return OkStatus();
  const auto t0 = Clock::now();
  par_.world->SetPhase("evaluation after step " + std::to_string(step));
  MOE_ASSIGN_OR_RETURN(const EvalResult r, EvaluateBatches(*model_, par_, spec_, *eval_sampler_,
                                                           spec_.training.eval_batches));
  if (place_.device
          .is_cuda()) {  // the evaluation's bounds-check bits, not the next step's (one read)
    kernels::FoldBadIndices(step_acc_, kBadIndexSlot);
    const double local = step_acc_.Rows(kBadIndexSlot, kBadIndexSlot + 1).ToVector<double>()[0];
    double any_rank =
        local;  // summed over the ranks, so that every rank fails the evaluation alike
    if (par_.world->size() > 1) MOE_RETURN_IF_ERROR(par_.world->AllReduceSumHost(&any_rank, 1));
    MOE_RETURN_IF_ERROR(
        BadIndexStatus(local, any_rank, "evaluation after step " + std::to_string(step)));
  }
  m->has_eval = true;
  m->eval_seconds = Since(t0);
  m->eval_loss = r.loss;
  m->eval_ppl = r.ppl();
  m->eval_mtp_loss = r.mtp_loss;
  if (lead_) {
    MOE_LOG(INFO) << "validation after step " << step << ": loss " << r.loss << " (ppl " << r.ppl()
                  << ")" << (model_->mtp_trains() ? ", mtp loss " + std::to_string(r.mtp_loss) : "")
                  << " over " << r.tokens << " tokens in " << spec_.training.eval_batches
                  << " batch(es) (" << Since(t0) << " s)";
  }
  return OkStatus();
}

Status Trainer::Report(const StepMetrics& m) {
  if (!std::isfinite(m.loss)) {
    return InternalError("step " + std::to_string(m.step) + ": the loss is " +
                         std::to_string(m.loss) + " (diverged)");
  }
  if (m.step == result_.first_step) result_.first_loss = m.loss;
  result_.last_step = m.step;
  result_.last_loss = m.loss;
  if (m.memory_peak_bytes > result_.peak_memory_bytes) {
    result_.peak_memory_bytes = m.memory_peak_bytes;
    for (const auto& [name, bytes] : m.memory_at_peak) {
      if (name == MemoryCategoryName(MemoryCategory::kActivations))
        result_.peak_activation_bytes = bytes;
    }
  }
  // The first step carries one-time costs (page faults, allocator warm-up); leave it out of means.
  if (m.step > result_.first_step || stop_step_ == result_.first_step) {
    sum_tps_ += m.tokens_per_second;
    sum_tflops_ += m.tflops_per_device;
    sum_mfu_ += m.mfu;
    ++measured_;
  }
  if (lead_) {
    if (metrics_file_.is_open()) metrics_file_ << MetricsJson(m) << "\n" << std::flush;
    if (history_file_.is_open()) MOE_RETURN_IF_ERROR(RecordHistory(m));
    const bool log_now = m.step % spec_.training.log_interval == 0 || m.step == stop_step_ ||
                         m.step == result_.first_step;
    if (options_.log_steps && log_now) MOE_LOG(INFO) << MegatronLogLine(m);
  }
  if (options_.on_step) options_.on_step(m);
  return OkStatus();
}

// The job's loss history beside its checkpoints (<dir>/metrics.jsonl, one JSON line per step, the
// lead rank's): started afresh by a run from step 0, appended to by a resumed one (steps redone
// after a resume appear again; the last line of a step is the one that counts). It survives
// restarts and controller outages, which the live stream does not; it is a record, so failing to
// open it only warns.
void Trainer::OpenHistory() {
  if (!lead_ || !checkpoints_) return;
  const std::string path = JoinPath(checkpoints_->dir(), "metrics.jsonl");
  if (Status st = MakeDirs(checkpoints_->dir()); st.ok()) {
    history_file_.open(path, start_step_ > 0 ? std::ios::app : std::ios::trunc);
  }
  if (!history_file_)
    MOE_LOG(WARNING) << "cannot open the loss history " << path
                     << "; this attempt's steps are not recorded there";
}

// One line of the loss history, only while this attempt still holds the directory: a rank fenced
// off (its attempt replaced while it ran on) stops here with ABORTED rather than interleave its
// steps with the live attempt's.
Status Trainer::RecordHistory(const StepMetrics& m) {
  if (ownership_) {
    const Status held = ownership_->Check();
    if (held.code() == StatusCode::kAborted) return held;
    // The marker cannot be read: the directory may have gone and come back (a storage outage). The
    // line still goes to the history file this rank holds open; the directory is opened again so
    // the next check (and save) reads the marker where it is now.
    if (!held.ok()) MOE_RETURN_IF_ERROR(ReopenCheckpoints());
  }
  history_file_ << MetricsJson(m) << "\n" << std::flush;
  return OkStatus();
}

// Asked to stop (a cancel, a worker's clean shutdown, a preemption): the steps since the last
// checkpoint are kept by one more, at the boundary every rank agreed on (a clean stop costs no
// work).
StatusOr<TrainResult> Train(const JobSpec& spec, const parallel::ParallelContext& par,
                            const TrainerOptions& options) {
  std::unique_ptr<Trainer> trainer;
  try {
    MOE_ASSIGN_OR_RETURN(trainer, Trainer::Create(spec, par, options));
  } catch (const std::bad_alloc&) {  // a permanent failure: the next attempt would hit it again
    // FAILED_PRECONDITION (cannot run here: permanent), not RESOURCE_EXHAUSTED, which also means a
    // full disk and stays transient.
    return FailedPreconditionError(
        "out of memory at initialisation: the model, its gradients and the optimizer state do not "
        "fit in this "
        "rank's memory (moe-train --describe gives the per-rank accounting; use more ranks or a "
        "smaller model)");
  }
  return trainer->Run();
}

}  // namespace moe::train
