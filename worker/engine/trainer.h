// The training loop of one rank: data, forward/backward over micro-batches, gradient synchronisation,
// clipping, AdamW, aux-loss-free bias updates, metrics, checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/metrics.h"

namespace moe {

struct TrainerOptions {
  // Stop after this step (0: spec.training.steps). The learning-rate schedule always follows the job's
  // training.steps (or optimizer.decay_steps), so stopping early and resuming later changes nothing.
  int64_t stop_at_step = 0;
  std::string checkpoint_dir;         // overrides spec.checkpoint.dir
  int64_t checkpoint_interval = -1;   // overrides spec.checkpoint.interval_steps when >= 0
  bool resume = false;                // continue from the newest complete checkpoint, if any
  std::string metrics_out;            // JSON lines, one per step (rank 0)
  double peak_flops = 0;              // MFU denominator per device; 0: measure (CPU SGEMM probe)
  std::string peak_source;
  bool log_steps = true;              // Megatron-style lines at spec.training.log_interval (rank 0)
  // Called on every rank after every step (the worker agent streams these to the controller).
  std::function<void(const StepMetrics&)> on_step;
  // Polled at step boundaries; true stops the run there (cancel, drain). Must agree across ranks.
  std::function<bool()> should_stop;
  // Where this rank trains: "" follows spec.resources.device (cpu; cuda: device rank % GPUs here),
  // or "cpu", "cuda", "cuda:N".
  std::string device;
  // "" (bf16 on cuda, fp32 on cpu), "fp32", or "bf16": bf16 activations and weight copies with fp32
  // master weights, gradients, optimizer state, routing and loss.
  std::string precision;
  // Test hook: extra seconds this rank sleeps each step (a slow rank, for straggler detection).
  double inject_step_delay = 0;
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
};

// The GPU a rank trains on: -1 for "cpu", rank % gpus for "cuda", N for "cuda:N"; InvalidArgument
// naming --device for anything else. (gpus <= 0 counts as one, for checking the form alone.)
StatusOr<int> CudaIndexFor(const std::string& device, int rank, int gpus);

// Runs the job's training on this rank. `par` describes the layout and owns nothing.
StatusOr<TrainResult> Train(const JobSpec& spec, const ParallelContext& par, const TrainerOptions& options);

}  // namespace moe
