// The training loop of one rank, as a Trainer whose step reads as its phases:
//
//   data + forward/backward over the micro-batches   ForwardBackward  (a pipeline schedule replaces
//                                                                      only this phase)
//   gradient reduction, squared norms on the device  ReduceGradients
//   clipping and AdamW (the norm read on the device) Update
//   the step's one read, statistics, bias update     FinishStep (UpdateBias)
//   metrics (JSON line, log line, callback)          Report
//   checkpoint at the interval and at the end        MaybeCheckpoint
//
// Statistics travel in a StepStats, not in packed arrays; the device is chosen once
// (DevicePlacement).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/confined_dir.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/memory_stats.h"
#include "worker/engine/checkpoint/ownership.h"
#include "worker/engine/device.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/phase_timer.h"
#include "worker/engine/train/metrics.h"

namespace moe::checkpoint {
class AsyncCheckpointer;
class CheckpointManager;
}  // namespace moe::checkpoint
namespace moe::data {
class BatchSampler;
}  // namespace moe::data

namespace moe::train {

class Optimizer;

struct TrainerOptions {
  // Stop after this step (0: spec.training.steps). The learning-rate schedule always follows the
  // job's training.steps (or optimizer.decay_steps), so stopping early and resuming later changes
  // nothing.
  int64_t stop_at_step = 0;
  std::string checkpoint_dir;        // overrides spec.checkpoint.dir
  int64_t checkpoint_interval = -1;  // overrides spec.checkpoint.interval_steps when >= 0
  bool resume = false;               // continue from the newest complete checkpoint, if any
  std::string init_from;    // a Hugging Face DeepseekV3 directory to start from (when no checkpoint
                            // is resumed)
  std::string metrics_out;  // JSON lines, one per step (rank 0)
  // Where the worker confines the job's paths (moe-worker --data-root, --checkpoint-root, passed on
  // by its agent): the data and checkpoint directories are opened beneath them
  // (common/confined_dir.h). Empty: the paths are used as they are (moe-train on its own).
  std::vector<std::string> data_roots, checkpoint_roots;
  // The job and attempt this rank runs for (the agent passes them): the lead rank claims the
  // checkpoint directory with it and every commit, prune and history line is fenced by it
  // (checkpoint/ownership.h). Absent: no claim (moe-train on its own).
  std::optional<checkpoint::OwnerClaim> owner;
  double peak_flops = 0;  // MFU denominator per device; 0: measure (CPU SGEMM probe)
  std::string peak_source;
  bool log_steps = true;  // Megatron-style lines at spec.training.log_interval (rank 0)
  // Called on every rank after every step (the worker agent streams these to the controller).
  std::function<void(const StepMetrics&)> on_step;
  // Polled at step boundaries; true stops the run there (cancel, drain). Must agree across ranks.
  std::function<bool()> should_stop;
  // Told when the rank starts (true) and ends (false) work that a stop must not cut: writing a
  // checkpoint, and the agreed stop from the boundary on (moe-train's stop watchdog stands down).
  std::function<void(bool)> on_protected;
  // Where this rank trains, when the caller has already placed it (moe-train does, before making
  // its communicators). Otherwise `device` and `precision` are resolved here.
  std::optional<DevicePlacement> placement;
  // "" follows spec.resources.device (cpu; cuda: device rank % GPUs here), or "cpu", "cuda",
  // "cuda:N".
  std::string device;
  // "" (bf16 on cuda, fp32 on cpu), "fp32", or "bf16": bf16 activations and weight copies with fp32
  // master weights, gradients, optimizer state, routing and loss.
  std::string precision;
  // Test hook: extra seconds this rank sleeps each step (a slow rank, for straggler detection).
  double inject_step_delay = 0;
  // Test hook: the gradient norm of this step reads as NaN (a step whose update is skipped).
  int64_t inject_nonfinite_grad_step = 0;
};

struct TrainResult {
  int64_t first_step = 0;  // the first step this run executed (after a resume: checkpoint step + 1)
  int64_t last_step = 0;
  double first_loss = 0, last_loss = 0;
  double mean_tokens_per_second = 0;
  double mean_tflops_per_device = 0;
  double mean_mfu = 0;
  std::string peak_source;
  std::string device;     // "cpu", "cuda:0 (NVIDIA H200)"
  std::string precision;  // "fp32" or "bf16"
  bool stopped_early = false;
  int64_t peak_memory_bytes = 0;      // this rank's largest step peak (metrics memory_peak_bytes)
  int64_t peak_activation_bytes = 0;  // the activations' share at that peak
  // checkpoint.async: the saves written in the background (committed or given up) and the seconds
  // their writes took there, summed.
  int64_t background_saves = 0;
  double background_write_seconds = 0;
  // The newest checkpoint written (or resumed from) when the run ended (0: none); the rank's final
  // record carries it to the controller (a stop's or the last step's save, after the last report).
  int64_t checkpoint_step = 0;
};

// What one step's phases produce.
struct StepStats {
  // The step's shape: its global batch (the ramp may grow it) and the tokens trained before it.
  int64_t global_batch = 0;
  double tokens_before = 0;
  // Summed over this rank's micro-batches, then (in FinishStep) over the global batch.
  double ce_sum = 0;                // token cross-entropies (nats)
  std::vector<double> mtp_ce_sums;  // [D] the same for each MTP depth
  double aux_loss = 0;  // the sequence-wise balance loss, already scaled to the global mean
  std::vector<std::vector<double>> tokens_per_expert;  // [MoE layer][expert]
  // Squared gradient norms of what this rank owns (summed over ranks: the global ones) and the
  // norm.
  double dense_sq = 0, expert_sq = 0;
  double grad_norm = 0;
  double lr = 0;
  bool update_skipped = false;  // a non-finite gradient norm: no update this step
  double mtp_loss_weight = 0;   // lambda at this step
  double bias_update_rate = 0;  // gamma at this step
  // Timings (seconds).
  double alltoall_seconds = 0;  // the MoE token all-to-all inside forward/backward
  double forward_backward_seconds = 0;
  double grad_sync_seconds = 0;
  double step_seconds = 0;
  // Pipeline: the fraction of forward/backward time spent in point-to-point exchanges (this rank's,
  // then after FinishStep the mean over ranks).
  double pipeline_bubble = 0;
  int64_t host_syncs = 0;  // kernels::HostSyncs over the step
  MemoryUsage memory;      // this rank's device memory over the step (its peak)

  // Adds one micro-batch's losses and token counts (by model-wide MoE layer).
  void Add(const model::MicroBatchResult& mb);
  // The statistics summed over ranks travel as one host buffer (one all-reduce per step); the
  // squared norms are not in it (they are summed on the device before the update).
  std::vector<double> Pack() const;
  void Unpack(const std::vector<double>& packed);
};

class Trainer {
 public:
  // Builds the model on this rank's device, the optimizer, the data sampler and the checkpoints;
  // restores the newest checkpoint when options.resume.
  static StatusOr<std::unique_ptr<Trainer>> Create(const JobSpec& spec,
                                                   const parallel::ParallelContext& par,
                                                   const TrainerOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the step after the restored one to the stop step.
  StatusOr<TrainResult> Run();
  // The model and its optimizer (tests read their state between runs).
  model::Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }

 private:
  Trainer(const JobSpec& spec, const parallel::ParallelContext& par, const TrainerOptions& options);
  Status Init();
  Status BuildModel();
  Status Restore(int64_t step);
  void MeasurePeak();
  void LogSetup() const;
  StatusOr<bool> AgreeToStop(int64_t step);
  Status Step(int64_t step);
  // The global batch of `step` and the samples consumed before it (the ramp makes these a walk from
  // step 1; without one, (step - 1) * global batch).
  void PlanStep(int64_t step, StepStats* stats) const;

  model::LossScales ScalesFor(const StepStats& stats) const;
  // The phases of a step.
  Status ForwardBackward(int64_t step, StepStats* stats);
  Status PipelineForwardBackward(int64_t micro_batches, int64_t first_sample,
                                 const model::LossScales& scales, StepStats* stats);
  Status ReduceGradients();
  Status Update(int64_t step, StepStats* stats);
  // The step's one read of the device (losses, squared norms), the statistics summed over ranks,
  // the norm and whether the update was skipped; then the expert bias.
  Status FinishStep(int64_t step, StepStats* stats);
  void UpdateBias(const StepStats& stats);
  StepMetrics Metrics(int64_t step, const StepStats& stats) const;
  Status Report(const StepMetrics& m);
  // After step `step`: the validation loss when it is due (every eval_interval steps and at the
  // end).
  Status MaybeEvaluate(int64_t step, StepMetrics* m);
  Status OpenData();
  Status OpenCheckpoints();
  Status ReopenCheckpoints();
  Status RecordHistory(const StepMetrics& m);
  Status MaybeCheckpoint(int64_t step, const StepMetrics& m);
  // `sync`: written before it returns even when checkpoint.async (the final and the stop's).
  Status SaveCheckpoint(int64_t step, const StepMetrics& m, bool sync);
  // The asynchronous save in flight: committed once every rank's write is durable (`wait`: waits
  // for it, when the next save is due or the run ends).
  Status FinishAsyncCheckpoint(int64_t step, bool wait);
  // A save every rank gave up (storage trouble): training goes on, except at the final step.
  Status CheckpointFailed(int64_t step, const Status& storage);
  Status CheckpointOnStop(int64_t last_step);
  void OpenHistory();

  const JobSpec spec_;
  const parallel::ParallelContext par_;
  const TrainerOptions options_;
  const bool lead_;             // rank 0: logs, metrics file
  bool deterministic_ = false;  // training.deterministic on this rank's device
  const int64_t stop_step_;
  DevicePlacement place_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::BatchSampler>
      eval_sampler_;  // the validation split, when training.eval_interval > 0
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<StageLayout> layout_;  // every virtual pipeline stage
  bool tied_embedding_ = false;      // the last stage keeps an embedding copy for MTP (PP > 1)
  std::unique_ptr<ConfinedDir> data_dir_, checkpoint_handle_;  // held open beneath the roots
  std::string data_path_found_;  // a relative spec.data.path as OpenData found it below a root
  std::unique_ptr<ConfinedDir> retired_checkpoint_handle_;      // the one before a reopen
  std::unique_ptr<checkpoint::CheckpointOwnership> ownership_;  // the lead rank's claim
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints_;
  std::unique_ptr<checkpoint::AsyncCheckpointer>
      async_;                    // checkpoint.async (destroyed first: its writer)
  double checkpoint_stall_ = 0;  // seconds the saves stalled training since the last report
  std::string checkpoint_dir_;
  int64_t checkpoint_interval_ = 0;
  int64_t start_step_ = 0;  // the restored checkpoint's step (0: none)
  double flops_per_step_ = 0;
  double peak_flops_ = 0;
  std::string peak_source_;
  // The step's phase spans: the forward + backward, the dispatcher's all-to-alls, the gradient
  // reduction; device marks on CUDA, the host clock on the CPU (parallel/phase_timer.h).
  std::unique_ptr<parallel::PhaseTimer> phases_;
  std::ofstream metrics_file_;
  std::ofstream history_file_;       // <checkpoint dir>/metrics.jsonl (OpenHistory)
  int64_t checkpoints_skipped_ = 0;  // storage failures this attempt (MaybeCheckpoint)
  int64_t last_checkpoint_step_ = 0;
  std::optional<StepMetrics> last_metrics_;  // the last step's, for a checkpoint on stop
  Tensor tokens_, targets_, tokens_dev_,
      targets_dev_;  // [micro batch, seq]: host and device copies
  // f64 on the device, zeroed each step: [kCeSlot] main cross-entropy, [kAuxSlot] balance loss,
  // [kDenseSqSlot, kExpertSqSlot] the squared gradient norms (summed over ranks before the update),
  // [kBadSumSlot] the device-side bounds checks' bits summed over ranks (non-zero: some rank's
  // batch had an index out of range; reduced with the squares, it skips the update everywhere),
  // [kBadIndexSlot] this rank's bits (kernels/runtime.h BadIndexKind), [kMtpSlot + k] MTP depth
  // k+1's cross-entropy. Read once, at the end of the step.
  Tensor step_acc_;
  static constexpr int64_t kCeSlot = 0, kAuxSlot = 1, kDenseSqSlot = 2, kExpertSqSlot = 3,
                           kBadSumSlot = 4, kBadIndexSlot = 5, kMtpSlot = 6;
  // This rank's bad-index bits as an error naming them and `when`; OK when there are none.
  Status BadIndexStatus(double local_bits, double any_rank, const std::string& when) const;
  TrainResult result_;
  // Means over the steps after the first (which carries one-time costs).
  double sum_tps_ = 0, sum_tflops_ = 0, sum_mfu_ = 0;
  int64_t measured_ = 0;
};

// Runs the job's training on this rank: Trainer::Create, then Run. `par` describes the layout and
// owns nothing.
StatusOr<TrainResult> Train(const JobSpec& spec, const parallel::ParallelContext& par,
                            const TrainerOptions& options);

}  // namespace moe::train
