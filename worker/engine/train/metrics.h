// Per-step training metrics: the JSON line written to --metrics-out and streamed to the controller,
// and the Megatron-style log line.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moe::train {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;      // mean cross-entropy (nats/token) over the global batch
  double aux_loss = 0;  // sequence-wise balance loss, summed over MoE layers
  double mtp_loss =
      0;  // multi-token prediction: mean over depths of each depth's mean cross-entropy
  double mtp_loss_weight = 0;  // lambda this step (0 when the model trains no MTP)
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double step_seconds = 0;
  double tokens_per_second = 0;
  double tflops_per_device = 0;      // Megatron's formula
  double mfu = 0;                    // achieved / peak per device (0..1)
  double peak_tflops = 0;            // the peak MFU is against
  std::string peak_source;           // what that peak is ("SGEMM probe ...", "datasheet bf16 ...")
  double expert_load_imbalance = 0;  // max over MoE layers of max/mean tokens per expert
  std::vector<double> expert_load_imbalance_per_layer;
  double alltoall_seconds = 0;   // token dispatch/combine all-to-all, this step (rank 0's)
  double compute_seconds = 0;    // forward + backward excluding the all-to-all
  double grad_sync_seconds = 0;  // gradient all-reduce
  double pipeline_bubble = 0;    // pipeline: fraction of forward/backward time in point-to-point
                                 // exchanges (mean over ranks)
  int64_t host_syncs =
      0;  // rank 0's host synchronisations this step (kernels::HostSyncs; CPU: where CUDA would)
  // This rank's device memory over the step (kernels/memory_stats.h): the peak of what its tensors
  // held, and each category's share at that moment (weights, gradients, optimizer, activations,
  // communication, other).
  int64_t memory_peak_bytes = 0;
  int64_t checkpoint_step =
      0;  // the newest complete checkpoint when this step was reported (0: none)
  std::vector<std::pair<std::string, int64_t>> memory_at_peak;
  // Seconds training stood still since the previous report for checkpoint saves (synchronous: the
  // whole write; asynchronous: the copy to host memory, any wait for the save before it, and the
  // commit) and for validation passes (goodput's checkpoint and evaluation causes).
  double checkpoint_stall_seconds = 0;
  double eval_seconds = 0;
  // Evaluation on the validation split (training.eval_interval), on the steps it ran after.
  bool has_eval = false;
  double eval_loss = 0;      // mean next-token cross-entropy over the eval batches (nats/token)
  double eval_ppl = 0;       // exp(eval_loss)
  double eval_mtp_loss = 0;  // the MTP loss there (0 without MTP)
  int64_t tokens = 0;        // tokens in the global batch
  int64_t consumed_samples = 0;
  int world_size = 1;
  int rank = 0;
};

std::string MetricsJson(const StepMetrics& m);
std::string MegatronLogLine(const StepMetrics& m);

}  // namespace moe::train
