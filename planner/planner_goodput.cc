// moectl plan --gpus (a job scaled by data parallelism) and --mtbf-hours (checkpoint advice:
// Young's interval and the goodput it predicts; docs/planning.md, "Checkpoint advice").
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/planner.h"

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

namespace {

// The global batch must be a multiple of this at data-parallel size `dp`: whole micro-batches per
// replica, and with interleaving whole rounds of pipeline_parallel of them (ValidateJobSpec).
int64_t BatchUnit(const JobSpec& spec, int64_t dp) {
  const ParallelismConfig& par = spec.parallelism;
  return spec.data.micro_batch_size * dp * (par.virtual_pipeline > 1 ? par.pipeline_parallel : 1);
}

bool HoldsBatch(const JobSpec& spec, int64_t gpus) {
  return spec.data.global_batch_size % BatchUnit(spec, gpus / spec.parallelism.pipeline_parallel) ==
         0;
}

// The sizes nearest `gpus` (multiples of `step` = PP x EP) at which the job's own global batch
// runs, in words: "1536 and 2560 GPUs keep 15360", one of them, or none.
std::string ExactSizes(const JobSpec& spec, int64_t gpus, int64_t step) {
  std::string below, above;
  for (int64_t g = gpus - step; g >= step && below.empty(); g -= step) {
    if (HoldsBatch(spec, g)) below = Int(g);
  }
  const int64_t pp = spec.parallelism.pipeline_parallel;
  for (int64_t g = gpus + step; BatchUnit(spec, g / pp) <= spec.data.global_batch_size; g += step) {
    if (HoldsBatch(spec, g)) {
      above = Int(g);
      break;
    }
  }
  const std::string g0 = Int(spec.data.global_batch_size);
  if (below.empty() && above.empty()) return "no GPU count of this layout keeps " + g0;
  if (below.empty() || above.empty()) return below + above + " GPUs keep " + g0;
  return below + " and " + above + " GPUs keep " + g0;
}

// The job's global batch at `gpus` (`s` has the new world size): kept where the layout runs it,
// else the nearest that it runs, said.
std::string KeepBatch(const JobSpec& spec, int64_t gpus, JobSpec* s) {
  const ParallelismConfig& par = spec.parallelism;
  const int64_t g0 = spec.data.global_batch_size,
                unit = BatchUnit(spec, gpus / par.pipeline_parallel);
  const std::string how = " (--scale-batch scales it with DP instead)";
  if (g0 % unit == 0) {
    return "global batch " + Int(g0) + " sequences kept, " + Int(s->micro_batches_per_rank()) +
           " micro-batches per rank (" + Int(spec.micro_batches_per_rank()) + " before)" + how;
  }
  s->data.global_batch_size = std::max<int64_t>(1, (g0 + unit / 2) / unit) * unit;
  return "global batch " + Int(g0) + " -> " + Int(s->data.global_batch_size) +
         " sequences, the nearest this layout runs on " + Int(gpus) + " GPUs (a multiple of " +
         Int(unit) + ": micro_batch_size " + Int(spec.data.micro_batch_size) + " x DP " +
         Int(gpus / par.pipeline_parallel) +
         (par.virtual_pipeline > 1
              ? " x PP " + Int(par.pipeline_parallel) + ", interleaving's rounds"
              : std::string()) +
         "); " + ExactSizes(spec, gpus, par.pipeline_parallel * par.expert_parallel) + how;
}

// --scale-batch: the batch per data-parallel replica kept, the global batch scaled with DP.
StatusOr<std::string> ScaleBatch(const JobSpec& spec, int64_t dp1, JobSpec* s) {
  const int64_t dp0 = spec.parallelism.data_parallel(), g0 = spec.data.global_batch_size;
  const int64_t per_replica = g0 / dp0;
  if (per_replica * dp0 != g0) {
    return InvalidArgumentError("--gpus --scale-batch: the job's global_batch_size " + Int(g0) +
                                " is not a whole batch per data-parallel replica (DP " + Int(dp0) +
                                ")");
  }
  s->data.global_batch_size = per_replica * dp1;
  return "global batch " + Int(g0) + " -> " + Int(s->data.global_batch_size) + " sequences (" +
         Int(per_replica) + " per data-parallel replica, kept: --scale-batch)";
}

// The batch ramp at the new size (scaled with DP under --scale-batch): kept where each of its
// batches runs in whole units at the new DP, else dropped and said.
std::string FitRamp(const JobSpec& spec, bool scale_batch, int64_t dp1, JobSpec* s) {
  BatchRampConfig& r = s->data.batch_ramp;
  if (r.start == 0) return "";
  const int64_t dp0 = spec.parallelism.data_parallel();
  if (scale_batch && r.start % dp0 == 0 && r.increment % dp0 == 0)
    r.start = r.start / dp0 * dp1, r.increment = r.increment / dp0 * dp1;
  const int64_t unit = BatchUnit(spec, dp1), g = s->data.global_batch_size;
  if (r.start % unit == 0 && r.increment % unit == 0 && r.start < g &&
      (g - r.start) % r.increment == 0) {
    return "";
  }
  const BatchRampConfig& was = spec.data.batch_ramp;
  r = BatchRampConfig{};
  return "; the batch ramp (from " + Int(was.start) + " by " + Int(was.increment) +
         ") dropped: its batches are not multiples of " + Int(unit) + " at DP " + Int(dp1);
}

// The fewest steps that train at least `tokens`, the batch ramp included.
int64_t StepsForTokens(const JobSpec& s, double tokens) {
  int64_t lo = 1, hi = 1;
  while (s.TokensAfter(hi) < tokens && hi < (int64_t{1} << 50)) hi *= 2;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (s.TokensAfter(mid) >= tokens) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

}  // namespace

StatusOr<JobSpec> ScaleToGpus(const JobSpec& spec, int64_t gpus, bool scale_batch,
                              std::string* note) {
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
  JobSpec s = spec;
  s.parallelism.world_size = gpus;
  std::string batch;
  if (scale_batch) {
    MOE_ASSIGN_OR_RETURN(batch, ScaleBatch(spec, dp1, &s));
  } else {
    batch = KeepBatch(spec, gpus, &s);
  }
  batch += FitRamp(spec, scale_batch, dp1, &s);
  s.training.steps = StepsForTokens(s, spec.TokensAfter(spec.training.steps));
  MOE_RETURN_IF_ERROR(ValidateJobSpec(s).WithPrefix("--gpus " + Int(gpus)));
  if (note != nullptr) {
    const int64_t n0 = spec.training.steps, n1 = s.training.steps;
    *note = "scaled to " + Int(gpus) + " GPUs by data parallelism: DP " + Int(dp0) + " -> " +
            Int(dp1) + " (PP, VPP and EP kept); " + batch + "; steps " +
            (n0 == n1 ? Int(n0) + " kept" : Int(n0) + " -> " + Int(n1)) + " (the same tokens)";
  }
  return s;
}

}  // namespace moe
