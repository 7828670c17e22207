// moectl plan's output (table and JSON) and the layout sweep.
#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>

#include "planner/planner.h"

namespace moe {
namespace {

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

Node Num(double v) { return Node::Scalar(Fmt("%.9g", v)); }
Node Int(int64_t v) { return Node::Scalar(std::to_string(v)); }
Node Str(const std::string& s) { return Node::Scalar(s, true); }

std::string Human(double v) {
  if (v >= 1e12) return Fmt("%.2fT", v / 1e12);
  if (v >= 1e9) return Fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return Fmt("%.2fM", v / 1e6);
  if (v >= 1e3) return Fmt("%.1fk", v / 1e3);
  return Fmt("%.0f", v);
}

// The ways a sweep changes a job: recompute sets from none to full.
const std::vector<std::vector<std::string>>& RecomputeChoices() {
  static const auto* choices = new std::vector<std::vector<std::string>>{
      {}, {"mla_up_proj"}, {"mlp", "mla_up_proj"}, {"mlp", "mla_up_proj", "moe_act"}, {"full"}};
  return *choices;
}

std::vector<int64_t> Divisors(int64_t n, int64_t cap) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, cap); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// Those that fit, then those the software's stack runs, then the fastest.
bool Better(const Plan& a, const Plan& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.runnable != b.runnable) return a.runnable;
  return a.tflops_per_gpu > b.tflops_per_gpu;
}

// Where a layout does not fit on a GPU cluster: the same layout at TP 2, 4 and 8 that the cluster's
// domains hold (PlanJob refuses those that do not divide the heads and DP).
void TryTensorParallel(const JobSpec& spec, const ClusterProfile& c, const SoftwareProfile& s,
                       const PlanOptions& single, std::vector<Plan>* out) {
  if (c.device != "cuda") return;
  for (int64_t tp : {2, 4, 8}) {
    if (tp > c.domain_size) break;
    PlanOptions o = single;
    o.tensor_parallel = tp;
    auto p = PlanJob(spec, c, s, o);
    if (p.ok()) out->push_back(std::move(*p));
  }
}

// One candidate: plan it if the spec takes it (an invalid layout is skipped, not an error), and
// with tensor parallelism where it does not fit.
void TryLayout(const JobSpec& base, const ClusterProfile& c, const SoftwareProfile& s,
               const PlanOptions& o, const std::array<int64_t, 4>& pp_vpp_ep_mbs,
               const std::vector<std::string>& recompute, std::vector<Plan>* out) {
  JobSpec spec = base;
  spec.parallelism.pipeline_parallel = pp_vpp_ep_mbs[0];
  spec.parallelism.virtual_pipeline = pp_vpp_ep_mbs[1];
  spec.parallelism.expert_parallel = pp_vpp_ep_mbs[2];
  spec.parallelism.pipeline_layout.clear();
  spec.data.micro_batch_size = pp_vpp_ep_mbs[3];
  spec.training.recompute = recompute;
  if (spec.model.is_mla() == false) {
    std::erase(spec.training.recompute, std::string("mla_up_proj"));
  }
  PlanOptions single = o;
  single.ep_domains = 0;
  single.tensor_parallel = 1;
  auto p = PlanJob(spec, c, s, single);
  if (!p.ok()) return;
  const bool fits = p->fits;
  out->push_back(std::move(*p));
  if (!fits) TryTensorParallel(spec, c, s, single, out);
}

// Hours or minutes, as read.
std::string Duration(double seconds) {
  if (seconds >= 5400) return Fmt("%.1f h", seconds / 3600);
  if (seconds >= 90) return Fmt("%.1f min", seconds / 60);
  return Fmt("%.3g s", seconds);
}

// --mtbf-hours: the save's inputs, the interval and the goodput (the last two lines are what
// docs/planning.md and docs/operations.md quote).
std::string CheckpointLines(const CheckpointAdvice& a, const std::string& cluster) {
  std::ostringstream o;
  o << "checkpoint: " << (a.async ? "async" : "sync") << " save of "
    << Fmt("%.3g GB", a.bytes_per_gpu / 1e9)
    << " per GPU (fp32 master weights + AdamW moments, this rank's shard): stall "
    << Fmt("%.3g s", a.stall_seconds)
    << (a.async ? " (the copy to host memory), then " + Fmt("%.3g s", a.persist_seconds) +
                      " to write it to storage"
                : std::string(" (the write to storage)"))
    << "; restart " << Fmt("%.0f s", a.restart_seconds) << " ("
    << Fmt("%.0f s", a.restart_seconds - a.load_seconds) << " start-up + "
    << Fmt("%.3g s", a.load_seconds) << " load); bandwidths from cluster profile " << cluster
    << "\n";
  const std::string mtbf = Fmt("system MTBF = %.6g h per GPU / ", a.mtbf_hours_per_gpu) +
                           std::to_string(a.gpus) + " GPUs = " + Duration(a.system_mtbf_seconds);
  if (!a.progress) {
    o << "checkpoint interval: none: the " << mtbf << " is not longer than a restart ("
      << Fmt("%.0f s", a.restart_seconds)
      << ") plus the checkpoints' cost: the job cannot make progress\n";
    o << "goodput: 0 (the job cannot make progress: fewer failures, a faster restart or a faster "
         "save)\n";
    return o.str();
  }
  o << "checkpoint interval: every " << a.interval_steps << " step"
    << (a.interval_steps == 1 ? "" : "s") << " (" << Duration(a.interval_seconds)
    << "; Young-Daly sqrt(2 x " << Fmt("%.3g s", a.stall_seconds) << " x MTBF "
    << Fmt("%.3g h", a.system_mtbf_seconds / 3600) << ") = " << Duration(a.young_daly_seconds)
    << " in whole steps of " << Fmt("%.3g s", a.step_seconds) << ", " << mtbf << ")\n";
  o << "goodput: " << Fmt("%.3f", a.goodput) << " (checkpoint stalls "
    << Fmt("%.1f %%", 100 * a.stall_share) << ", redone work " << Fmt("%.1f %%", 100 * a.redo_share)
    << ", restarts " << Fmt("%.1f %%", 100 * a.restart_share) << ")\n";
  return o.str();
}

Node CheckpointNode(const CheckpointAdvice& a) {
  Node n = Node::Map();
  n.Set("save", Str(a.async ? "async" : "sync"));
  n.Set("bytes_per_gpu", Num(a.bytes_per_gpu));
  n.Set("stall_seconds", Num(a.stall_seconds));
  n.Set("persist_seconds", Num(a.persist_seconds));
  n.Set("load_seconds", Num(a.load_seconds));
  n.Set("restart_seconds", Num(a.restart_seconds));
  n.Set("mtbf_hours_per_gpu", Num(a.mtbf_hours_per_gpu));
  n.Set("gpus", Int(a.gpus));
  n.Set("system_mtbf_seconds", Num(a.system_mtbf_seconds));
  n.Set("young_daly_seconds", Num(a.young_daly_seconds));
  n.Set("step_seconds", Num(a.step_seconds));
  n.Set("progress", Node::Scalar(a.progress ? "true" : "false"));
  n.Set("interval_steps", Int(a.interval_steps));
  n.Set("interval_seconds", Num(a.interval_seconds));
  n.Set("goodput", Num(a.goodput));
  n.Set("stall_share", Num(a.stall_share));
  n.Set("redo_share", Num(a.redo_share));
  n.Set("restart_share", Num(a.restart_share));
  return n;
}

}  // namespace

StatusOr<std::vector<Plan>> SweepLayouts(const JobSpec& spec, const ClusterProfile& cluster,
                                         const SoftwareProfile& software,
                                         const PlanOptions& options, size_t limit) {
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  const int64_t w = spec.parallelism.world_size;
  std::vector<Plan> plans;
  for (int64_t pp : Divisors(w, 64)) {
    for (int64_t vpp : {1, 2, 4, 8}) {
      const int64_t dp = w / pp;
      for (int64_t ep : Divisors(dp, std::max<int64_t>(spec.model.moe.num_experts, 1))) {
        for (int64_t mbs : {1, 2, 4}) {
          if (spec.data.global_batch_size % (mbs * dp) != 0) continue;
          for (const auto& rc : RecomputeChoices())
            TryLayout(spec, cluster, software, options, {pp, vpp, ep, mbs}, rc, &plans);
        }
      }
    }
  }
  if (plans.empty()) {
    return InvalidArgumentError("--sweep: no layout of world_size " + std::to_string(w) +
                                " divides the model and the global batch");
  }
  std::stable_sort(plans.begin(), plans.end(), Better);
  if (plans.size() > limit) plans.resize(limit);
  return plans;
}

// TFLOP/s as read: whole numbers on GPUs, three significant digits on CPUs (0.1 TFLOP/s).
std::string Tflops(double v) { return Fmt(v >= 10 ? "%.0f" : "%.3g", v); }

namespace {

// Which peak the plan's MFU is against, and the run's: a live job's own peak with its last step's
// measured figures, else which peak a run will measure.
std::string MfuPeakLine(const Plan& p) {
  std::ostringstream o;
  o << "mfu peak: " << Tflops(p.peak_tflops) << " TFLOP/s, " << p.peak_source;
  if (!p.run_mfu.has_value()) {
    o << "; " << p.run_peak_note << "\n";
    return o.str();
  }
  const RunMfu& r = *p.run_mfu;
  o << "; the run counts its MFU against " << Tflops(r.peak_tflops) << " TFLOP/s (" << r.peak_source
    << "): this plan's " << Tflops(p.tflops_per_gpu) << " TFLOP/s is "
    << Fmt("%.1f%%", 100 * p.mfu_run_peak) << " of it";
  if (r.tflops_per_device > 0) {
    o << "; the run's last step measured " << Tflops(r.tflops_per_device) << " TFLOP/s, MFU "
      << Fmt("%.1f%%", 100 * r.mfu);
  }
  o << "\n";
  return o.str();
}

Node PeakNode(const Plan& p) {
  Node n = Node::Map();
  n.Set("tflops", Num(p.peak_tflops));
  n.Set("source", Str(p.peak_source));
  if (!p.run_mfu.has_value()) {
    n.Set("run", Str(p.run_peak_note));
    return n;
  }
  Node r = Node::Map();
  r.Set("peak_tflops", Num(p.run_mfu->peak_tflops));
  r.Set("peak_source", Str(p.run_mfu->peak_source));
  r.Set("planned_mfu", Num(p.mfu_run_peak));
  r.Set("measured_tflops_per_device", Num(p.run_mfu->tflops_per_device));
  r.Set("measured_mfu", Num(p.run_mfu->mfu));
  n.Set("run", std::move(r));
  return n;
}

}  // namespace

std::string PlacementDifference(const Plan& placed, const Plan& packed) {
  std::ostringstream o;
  const char* per = placed.precision == "fp32" ? " TFLOP/s per device" : " TFLOP/s per GPU";
  o << "placement: expert-parallel groups span " << placed.ep_domains << " domain(s) of the job's "
    << placed.racks << "; with each group in one domain: step "
    << Fmt("%.3f s", packed.step_seconds) << ", " << Tflops(packed.tflops_per_gpu) << per << "\n";
  o << "  this placement: step " << Fmt("%.3f s", placed.step_seconds) << " ("
    << Fmt("%+.1f%%", 100 * (placed.step_seconds / packed.step_seconds - 1)) << "), "
    << Tflops(placed.tflops_per_gpu) << per << " ("
    << Fmt("%+.1f%%", 100 * (placed.tflops_per_gpu / packed.tflops_per_gpu - 1)) << ")\n";
  for (const PlanComponent& c : placed.components) {
    const PlanComponent* base = packed.Find(c.name);
    const double before = base != nullptr ? base->seconds : 0;
    if (c.seconds - before > 0.001 * packed.step_seconds) {
      o << "  grew: " << c.name << " " << Fmt("%.3f s", before) << " -> "
        << Fmt("%.3f s", c.seconds) << "\n";
    }
  }
  return o.str();
}

std::string PlanTable(const Plan& p) {
  std::ostringstream o;
  o << "plan: " << p.job << " on " << p.cluster << " (" << p.world_size << " devices in " << p.racks
    << " scale-up domain(s)), software " << p.software << ", " << p.precision << "\n";
  o << "layout: " << p.layout << ", " << p.micro_batches << " micro-batches per step, "
    << static_cast<int64_t>(p.rows_per_expert) << " rows per expert, expert-parallel groups span "
    << p.ep_domains << " domain(s)\n";
  if (!p.tp_note.empty()) o << "tensor parallelism: " << p.tp_note << "\n";
  if (!p.habits.empty()) o << "software habits: " << p.habits << "\n";
  o << "memory: " << p.memory_verdict << "\n";
  o << "  pp   weights  gradients  optimizer  activations     comm     total\n";
  for (const StageMemory& st : p.memory.stages) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-3d %8.1f %10.1f %10.1f %12.1f %8.1f %9.1f GB\n",
                  st.pp_rank, st.bytes[0] / 1e9, st.bytes[1] / 1e9, st.bytes[2] / 1e9,
                  st.bytes[3] / 1e9, st.bytes[4] / 1e9, st.peak() / 1e9);
    o << line;
  }
  o << "step time: " << Fmt("%.3f s", p.step_seconds) << "\n";
  o << "  component                          seconds   share  detail\n";
  for (const PlanComponent& c : p.components) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-32s %8.3f  %5.1f%%  ", c.name.c_str(), c.seconds,
                  100 * c.seconds / p.step_seconds);
    o << line << c.detail << "\n";
  }
  o << "throughput: " << Tflops(p.tflops_per_gpu) << " TFLOP/s per "
    << (p.precision == "fp32" ? "device" : "GPU") << " (Megatron-counted; MFU "
    << (p.run_mfu.has_value() ? Fmt("%.1f%% of the run's own peak, ", 100 * p.mfu_run_peak)
                              : std::string())
    << Fmt("%.1f%%", 100 * p.mfu_bf16) << " of the " << (p.precision == "fp32" ? "fp32" : "bf16")
    << " peak" << (p.mfu_fp8 > 0 ? Fmt(", %.1f%% of the fp8 peak", 100 * p.mfu_fp8) : std::string())
    << "), " << Human(p.tokens_per_second) << " tokens/s\n";
  o << MfuPeakLine(p);
  o << "budget: " << Human(p.tokens) << " tokens in " << Fmt("%.1f days", p.days) << ", "
    << Human(p.gpu_hours) << " GPU-hours\n";
  if (!p.scaling.empty()) o << "gpus: " << p.scaling << "\n";
  if (p.checkpoint.has_value()) o << CheckpointLines(*p.checkpoint, p.cluster);
  return o.str();
}

std::string SweepTable(const std::vector<Plan>& plans) {
  std::ostringstream o;
  o << "  #  layout                          recompute                   TFLOP/s/GPU   step s  "
       "peak GB  memory\n";
  int i = 0;
  for (const Plan& p : plans) {
    char line[256];
    std::snprintf(line, sizeof(line), "%3d  %-31s %-27s %11.0f %8.2f %8.1f  ", ++i,
                  p.layout.c_str(), p.recompute.c_str(), p.tflops_per_gpu, p.step_seconds,
                  p.memory.largest().peak() / 1e9);
    o << line << (p.fits ? "fits" : p.memory_verdict)
      << (p.runnable ? "" : ", needs TP: " + p.software + " runs none") << "\n";
  }
  return o.str();
}

Node PlanToNode(const Plan& p) {
  Node n = Node::Map();
  n.Set("job", Str(p.job));
  n.Set("cluster", Str(p.cluster));
  n.Set("software", Str(p.software));
  n.Set("precision", Str(p.precision));
  n.Set("layout", Str(p.layout));
  n.Set("recompute", Str(p.recompute));
  n.Set("world_size", Int(p.world_size));
  n.Set("racks", Int(p.racks));
  n.Set("ep_domains", Int(p.ep_domains));
  n.Set("micro_batches", Int(p.micro_batches));
  n.Set("rows_per_expert", Num(p.rows_per_expert));
  n.Set("tflops_per_gpu", Num(p.tflops_per_gpu));
  n.Set("step_seconds", Num(p.step_seconds));
  n.Set("mfu_bf16", Num(p.mfu_bf16));
  n.Set("mfu_fp8", Num(p.mfu_fp8));
  n.Set("mfu_peak", PeakNode(p));
  n.Set("tensor_parallel", Int(p.tensor_parallel));
  n.Set("runnable", Node::Scalar(p.runnable ? "true" : "false"));
  if (!p.tp_note.empty()) n.Set("tensor_parallel_note", Str(p.tp_note));
  n.Set("tokens_per_second", Num(p.tokens_per_second));
  n.Set("flops_per_step", Num(p.flops_per_step));
  n.Set("bubble_fraction", Num(p.bubble_fraction));
  Node comps = Node::List();
  for (const PlanComponent& c : p.components) {
    Node e = Node::Map();
    e.Set("name", Str(c.name));
    e.Set("seconds", Num(c.seconds));
    e.Set("detail", Str(c.detail));
    comps.Append(std::move(e));
  }
  n.Set("components", std::move(comps));
  Node mem = Node::Map();
  mem.Set("fits", Node::Scalar(p.fits ? "true" : "false"));
  mem.Set("verdict", Str(p.memory_verdict));
  mem.Set("capacity_bytes", Num(p.capacity_bytes));
  Node ranks = Node::List();
  for (const StageMemory& st : p.memory.stages) {
    Node r = Node::Map();
    r.Set("pp_rank", Int(st.pp_rank));
    for (size_t k = 0; k < kNumMemoryKinds; ++k)
      r.Set(std::string(MemoryKindName(static_cast<MemoryKind>(k))) + "_bytes", Num(st.bytes[k]));
    r.Set("peak_bytes", Num(st.peak()));
    ranks.Append(std::move(r));
  }
  mem.Set("ranks", std::move(ranks));
  n.Set("memory", std::move(mem));
  Node budget = Node::Map();
  budget.Set("tokens", Num(p.tokens));
  budget.Set("days", Num(p.days));
  budget.Set("gpu_hours", Num(p.gpu_hours));
  n.Set("budget", std::move(budget));
  if (!p.scaling.empty()) n.Set("scaling", Str(p.scaling));
  if (p.checkpoint.has_value()) n.Set("checkpoint", CheckpointNode(*p.checkpoint));
  return n;
}

}  // namespace moe
