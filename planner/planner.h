// moectl plan: a job's per-rank memory, step time and TFLOP/s on a named cluster with a named
// software stack, before it runs (docs/planning.md has the model, the profiles and the
// calibration).
//
// The step, per pipeline rank and micro-batch (forward + backward), from the same accounting the
// engine uses (common/flops.h: Megatron's FLOPs per layer; common/memory_model.h: per-rank memory):
//   dense GEMMs      attention projections, dense FFN, shared experts, MTP projection, head
//   routed experts   grouped GEMMs; efficiency falls with rows per expert (r / (r + half_rows))
//   attention core   flash attention in bf16
//   recompute        the forward of what training.recompute recomputes
//   memory-bound     norms, residuals, RoPE, SwiGLU, permute, router, quantisation, loss passes
//   all-to-all       dispatch + combine in the scale-up domain and across domains (group-limited
//                    routing caps the crossing share; the bytes that cross are forwarded over
//                    the scale-up link too, as hierarchical all-to-alls do), less what the stack
//                    overlaps
//   tensor parallel  TP > 1 (a planner layout: the job spec has no TP and this engine runs none):
//                    each layer's all-gathers and reduce-scatters in the scale-up domain
//   host             uncaptured launches, graph launches, host syncs
// then the pipeline: m micro-batches on the slowest rank plus the bubble (p - 1) / v of a rank's
// micro-batch; pipeline sends, the data-parallel reduce-scatter / all-gather and the optimizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/memory_model.h"
#include "common/plan_profiles.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe {

// What a running job reports of its MFU (StepMetrics): the peak the run counts it against (on CPU
// the SGEMM rate its ranks measured with their threads; on CUDA the bf16 GEMM rate it measured) and
// its last step's figures.
struct RunMfu {
  double peak_tflops = 0;
  std::string peak_source;
  double tflops_per_device = 0, mfu = 0;
};

struct PlanOptions {
  int64_t racks = 0;        // scale-up domains the job uses; 0: as few as its layout packs into
  int64_t ep_domains = 0;   // domains one expert-parallel group spans; 0: from the packing
  double token_budget = 0;  // tokens to train: days and GPU-hours; 0: the job's steps (with its
                            // batch ramp)
  // Checkpoint advice (CheckpointAdvice): a device's mean time between failures in hours (moectl
  // plan --mtbf-hours); absent: no advice.
  std::optional<double> mtbf_hours;
  bool async_checkpoint =
      true;  // the save's stall: async, the device-to-host copy; sync, the write
  // Tensor parallelism (moectl plan --tensor-parallel; the sweep where memory needs it): TP ranks
  // consecutive in a scale-up domain, dividing the heads and DP = world / PP. 1: none.
  int64_t tensor_parallel = 1;
  std::optional<RunMfu> run_mfu;  // a live job's: its MFU is stated against the run's peak too
};

// How often to checkpoint and what the job keeps of its wall time (docs/planning.md, "Checkpoint
// advice"): Young's first-order interval sqrt(2 x stall x system MTBF) between saves, rounded to
// whole steps, and the predicted goodput 1 - stall / interval - (interval / 2 + persist + restart)
// / MTBF, where persist is how long an async save takes to reach storage (a failure in it loses the
// previous interval too) and restart is start + rendezvous + checkpoint load.
struct CheckpointAdvice {
  bool async = true;
  double bytes_per_gpu = 0;    // master weights and optimizer moments, this rank's shard
  double stall_seconds = 0;    // the step's pause per save (async: the host copy; sync: the write)
  double persist_seconds = 0;  // an async save's write to storage after the stall (sync: 0)
  double load_seconds = 0;     // reading the checkpoint back on a restart
  double restart_seconds = 0;  // a restart's whole cost: the profile's start-up + load_seconds
  double mtbf_hours_per_gpu = 0;  // the input
  int64_t gpus = 0;
  double system_mtbf_seconds = 0;  // mtbf_hours_per_gpu x 3600 / gpus
  double young_daly_seconds = 0;   // sqrt(2 x stall x system MTBF)
  double step_seconds = 0;         // the productive step the interval is counted in
  int64_t interval_steps = 0;
  double interval_seconds = 0;  // interval_steps x step_seconds
  double goodput = 0, stall_share = 0, redo_share = 0, restart_share = 0;
  bool progress = true;  // false: the system fails faster than it saves or restarts
};

struct PlanComponent {
  std::string name;
  double seconds = 0;  // per step
  std::string detail;
};

struct Plan {
  std::string job, cluster, software, precision, layout, recompute;
  int64_t world_size = 0, racks = 0, ep_domains = 1, micro_batches = 0;
  int64_t tensor_parallel = 1;
  // TP > 1: who can run it. runnable is false when the software profile's stack runs no tensor
  // parallelism (this engine's); tp_note says so in words ("" at TP 1).
  bool runnable = true;
  std::string tp_note;
  MemoryPlan memory;
  double capacity_bytes = 0;
  bool fits = false;
  std::string memory_verdict;  // "fits" or which rank and category overflows
  std::vector<PlanComponent> components;
  double step_seconds = 0, flops_per_step = 0, tflops_per_gpu = 0;
  double mfu_bf16 = 0, mfu_fp8 = 0, tokens_per_second = 0;
  // The peak mfu_bf16 is against (the cluster profile's dense bf16 peak; fp32 SGEMM on cpu) and
  // what it is; the peak a run counts its MFU against, as far as the plan knows it (run_mfu: a live
  // job's; otherwise run_peak_note says which the run will measure).
  double peak_tflops = 0;
  std::string peak_source, run_peak_note;
  std::optional<RunMfu> run_mfu;
  double mfu_run_peak = 0;  // tflops_per_gpu / run_mfu->peak_tflops
  double rows_per_expert = 0, bubble_fraction = 0;
  double tokens = 0, days = 0, gpu_hours = 0;
  std::string scaling;  // --gpus: what ScaleToGpus changed
  std::string habits;   // what the software profile set that the job left to it ("" : nothing)
  std::optional<CheckpointAdvice> checkpoint;  // --mtbf-hours
  const PlanComponent* Find(const std::string& name) const;
};

// Young's interval: sqrt(2 x stall x MTBF) seconds of work between checkpoints.
double YoungDalyInterval(double stall_seconds, double mtbf_seconds);
// Goodput's first-order model, clamped to [0, 1]: the shares of wall time lost to stalls, redone
// work and restarts go into `advice` (its interval, stall, persist, restart and MTBF are inputs).
void PredictGoodput(CheckpointAdvice* advice);
// The advice for a plan: the checkpoint's bytes from the plan's memory model, the bandwidths and
// restart cost from the cluster profile. Errors name --mtbf-hours.
StatusOr<CheckpointAdvice> AdviseCheckpoint(const Plan& plan, const JobSpec& spec,
                                            const ClusterProfile& cluster, double mtbf_hours,
                                            bool async);

// The job on `gpus` devices by data parallelism: the same PP, VPP and EP, DP = gpus / PP, and
// training.steps set to train the same tokens. The global batch is kept (as an elastic resize keeps
// it); where the layout cannot run it in whole micro-batches (or, interleaved, whole rounds of PP
// micro-batches) per replica, the nearest global batch it can run, and the GPU counts that keep it
// exactly, are said. scale_batch (moectl plan --scale-batch): the batch per replica is kept instead
// and global_batch_size scales with DP. A batch ramp is kept where its steps run at the new DP
// (scaled with it under scale_batch), dropped and said otherwise. `note` says what changed. Errors
// name --gpus.
StatusOr<JobSpec> ScaleToGpus(const JobSpec& spec, int64_t gpus, bool scale_batch,
                              std::string* note);

// A placement as the planner reads it: the racks the ranks hold (rank r's rack at r) and the most
// racks one expert-parallel group spans (groups are consecutive blocks of `ep` ranks, Megatron's
// order).
PlanOptions PlacementOptions(const std::vector<std::string>& rank_racks, int64_t ep);

// The precision a job trains in: resources.precision, else fp32 on cpu and bf16 on cuda.
std::string JobPrecision(const JobSpec& spec);

StatusOr<Plan> PlanJob(JobSpec spec, const ClusterProfile& cluster, const SoftwareProfile& software,
                       const PlanOptions& options);

// The layouts of spec's world size (PP, VPP, EP, micro batch, recompute) that keep the global
// batch, planned and ranked: those that fit first, then those the software's stack runs, fastest
// first. Where a layout does not fit on a GPU cluster, the same layout with tensor parallelism (2,
// 4, 8 within a scale-up domain, dividing the heads and DP) is planned too; under a stack that runs
// no TP (ours) those rank after the layouts it runs, and say so. At most `limit`.
StatusOr<std::vector<Plan>> SweepLayouts(const JobSpec& spec, const ClusterProfile& cluster,
                                         const SoftwareProfile& software,
                                         const PlanOptions& options, size_t limit);

std::string PlanTable(const Plan& p);
std::string SweepTable(const std::vector<Plan>& plans);
// A placement's plan against the same job with every expert-parallel group in one domain: both step
// times and TFLOP/s, and the components that grew.
std::string PlacementDifference(const Plan& placed, const Plan& packed);
Node PlanToNode(const Plan& p);

}  // namespace moe
