// moectl plan --gpus (a job scaled by data parallelism) and --mtbf-hours (checkpoint advice:
// Young's interval and the goodput it predicts; docs/planning.md, "Checkpoint advice").
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/planner.h"

namespace moe {
namespace {

double D(int64_t v) { return static_cast<double>(v); }
std::string Int(int64_t v) { return std::to_string(v); }

// What one rank writes: its shard of the fp32 master weights and of both AdamW moments. Weights
// replicated over data parallelism are written once, each replica a share, so a dense parameter
// counts 1 / DP on a rank and an expert's 1 / (DP / EP), with or without the distributed optimizer.
// The largest pipeline rank sets the stall.
double CheckpointBytes(const Plan& plan, const JobSpec& spec) {
  const double moment = spec.optimizer.moments_dtype == "bf16" ? 2 : 4;
  const double dp = D(spec.parallelism.data_parallel());
  const double edp = D(std::max<int64_t>(spec.parallelism.expert_data_parallel(), 1));
  double most = 0;
  for (const StageMemory& st : plan.memory.stages) {
    const double shard = (st.params - st.expert_params) / dp + st.expert_params / edp;
    most = std::max(most, shard * (4 + 2 * moment));
  }
  return most;
}

// The step without the software profile's flat goodput allowance (this advice replaces it).
double ProductiveStep(const Plan& plan) {
  const PlanComponent* lost = plan.Find("lost time (goodput)");
  return plan.step_seconds - (lost != nullptr ? lost->seconds : 0);
}

}  // namespace

double YoungDalyInterval(double stall_seconds, double mtbf_seconds) {
  return std::sqrt(2 * std::max(stall_seconds, 0.0) * std::max(mtbf_seconds, 0.0));
}

void PredictGoodput(CheckpointAdvice* a) {
  const double m = a->system_mtbf_seconds, tau = a->interval_seconds;
  a->stall_share = tau > 0 ? a->stall_seconds / tau : 1;
  a->redo_share = m > 0 ? (tau / 2 + a->persist_seconds) / m : 1;
  a->restart_share = m > 0 ? a->restart_seconds / m : 1;
  const double g = 1 - a->stall_share - a->redo_share - a->restart_share;
  a->progress = m > a->stall_seconds && m > a->restart_seconds && g > 0;
  a->goodput = a->progress ? std::clamp(g, 0.0, 1.0) : 0;
}

StatusOr<CheckpointAdvice> AdviseCheckpoint(const Plan& plan, const JobSpec& spec,
                                            const ClusterProfile& c, double mtbf_hours,
                                            bool async) {
  if (!(mtbf_hours > 0) || !std::isfinite(mtbf_hours)) {
    char got[64];
    std::snprintf(got, sizeof(got), "%g", mtbf_hours);
    return InvalidArgumentError(
        std::string("--mtbf-hours: a device's mean time between failures in hours must be a "
                    "finite number > 0 (the public planning figure for a GPU: 50000), got ") +
        got);
  }
  CheckpointAdvice a;
  a.async = async;
  a.gpus = spec.parallelism.world_size;
  a.mtbf_hours_per_gpu = mtbf_hours;
  a.bytes_per_gpu = CheckpointBytes(plan, spec);
  const double write = a.bytes_per_gpu / (c.checkpoint_write_gbps * 1e9);
  a.stall_seconds = async ? a.bytes_per_gpu / (c.host_copy_gbps * 1e9) : write;
  a.persist_seconds = async ? write : 0;
  a.load_seconds = a.bytes_per_gpu / (c.checkpoint_read_gbps * 1e9);
  a.restart_seconds = c.restart_seconds + a.load_seconds;
  a.system_mtbf_seconds = mtbf_hours * 3600 / D(std::max<int64_t>(a.gpus, 1));
  a.step_seconds = ProductiveStep(plan);
  a.young_daly_seconds = YoungDalyInterval(a.stall_seconds, a.system_mtbf_seconds);
  const double step = std::max(a.step_seconds, 1e-9);
  double steps = std::max(1.0, std::round(a.young_daly_seconds / step));
  // An async save's write must end before the next save's copy starts.
  if (async) steps = std::max(steps, std::ceil(a.persist_seconds / step));
  a.interval_steps = static_cast<int64_t>(std::min(steps, 1e15));
  a.interval_seconds = D(a.interval_steps) * a.step_seconds;
  PredictGoodput(&a);
  return a;
}

StatusOr<JobSpec> ScaleToGpus(const JobSpec& spec, int64_t gpus, std::string* note) {
  const ParallelismConfig& par = spec.parallelism;
  const int64_t unit = par.pipeline_parallel * par.expert_parallel;
  if (gpus <= 0) return InvalidArgumentError("--gpus: must be > 0, got " + Int(gpus));
  if (gpus % unit != 0) {
    const int64_t below = gpus / unit * unit, above = below + unit;
    return InvalidArgumentError(
        "--gpus " + Int(gpus) + ": not a multiple of " + Int(unit) +
        ", the ranks one data-parallel replica of this layout needs (pipeline_parallel " +
        Int(par.pipeline_parallel) + " x expert_parallel " + Int(par.expert_parallel) +
        "); the nearest are " + (below > 0 ? Int(below) + " and " : std::string()) + Int(above));
  }
  const int64_t dp0 = par.data_parallel(), dp1 = gpus / par.pipeline_parallel;
  const int64_t per_replica = spec.data.global_batch_size / dp0;
  if (per_replica * dp0 != spec.data.global_batch_size) {
    return InvalidArgumentError(
        "--gpus: the job's global_batch_size " + Int(spec.data.global_batch_size) +
        " is not a whole batch per data-parallel replica (DP " + Int(dp0) + ")");
  }
  JobSpec s = spec;
  s.parallelism.world_size = gpus;
  s.data.global_batch_size = per_replica * dp1;
  BatchRampConfig& ramp = s.data.batch_ramp;
  if (ramp.start % dp0 == 0 && ramp.increment % dp0 == 0) {
    ramp.start = ramp.start / dp0 * dp1, ramp.increment = ramp.increment / dp0 * dp1;
  } else {
    ramp = BatchRampConfig{};
  }
  s.training.steps = (spec.training.steps * dp0 + dp1 - 1) / dp1;
  MOE_RETURN_IF_ERROR(ValidateJobSpec(s).WithPrefix("--gpus " + Int(gpus)));
  if (note != nullptr) {
    *note = "scaled to " + Int(gpus) + " GPUs by data parallelism: DP " + Int(dp0) + " -> " +
            Int(dp1) + " (PP, VPP and EP kept); global batch " + Int(spec.data.global_batch_size) +
            " -> " + Int(s.data.global_batch_size) + " sequences (" + Int(per_replica) +
            " per data-parallel replica, kept); steps " + Int(spec.training.steps) + " -> " +
            Int(s.training.steps) + " (the same tokens)";
  }
  return s;
}

}  // namespace moe
