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
//                    routing caps the crossing share), less what the stack overlaps
//   host             uncaptured launches, graph launches, host syncs
// then the pipeline: m micro-batches on the slowest rank plus the bubble (p - 1) / v of a rank's
// micro-batch; pipeline sends, the data-parallel reduce-scatter / all-gather and the optimizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/memory_model.h"
#include "common/plan_profiles.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe {

struct PlanOptions {
  int64_t racks = 0;        // scale-up domains the job uses; 0: as few as its layout packs into
  int64_t ep_domains = 0;   // domains one expert-parallel group spans; 0: from the packing
  double token_budget = 0;  // tokens to train: days and GPU-hours; 0: the job's steps x batch
};

struct PlanComponent {
  std::string name;
  double seconds = 0;  // per step
  std::string detail;
};

struct Plan {
  std::string job, cluster, software, precision, layout, recompute;
  int64_t world_size = 0, racks = 0, ep_domains = 1, micro_batches = 0;
  MemoryPlan memory;
  double capacity_bytes = 0;
  bool fits = false;
  std::string memory_verdict;  // "fits" or which rank and category overflows
  std::vector<PlanComponent> components;
  double step_seconds = 0, flops_per_step = 0, tflops_per_gpu = 0;
  double mfu_bf16 = 0, mfu_fp8 = 0, tokens_per_second = 0;
  double rows_per_expert = 0, bubble_fraction = 0;
  double tokens = 0, days = 0, gpu_hours = 0;
  const PlanComponent* Find(const std::string& name) const;
};

// A placement as the planner reads it: the racks the ranks hold (rank r's rack at r) and the most
// racks one expert-parallel group spans (groups are consecutive blocks of `ep` ranks, Megatron's
// order).
PlanOptions PlacementOptions(const std::vector<std::string>& rank_racks, int64_t ep);

// The precision a job trains in: resources.precision, else fp32 on cpu and bf16 on cuda.
std::string JobPrecision(const JobSpec& spec);

StatusOr<Plan> PlanJob(JobSpec spec, const ClusterProfile& cluster, const SoftwareProfile& software,
                       const PlanOptions& options);

// The layouts of spec's world size (PP, VPP, EP, micro batch, recompute) that keep the global
// batch, planned and ranked: those that fit first, fastest first. At most `limit`.
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
