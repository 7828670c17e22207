#include "cli/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/file_util.h"
#include "common/job_spec_proto.h"
#include "planner/planner.h"
#include "planner/published_runs.h"

namespace moe::cli {
namespace {

using Stub = moe::v1::JobService::Stub;

int Refuse(const Status& st) {
  std::fprintf(stderr, "moectl plan: %s\n", st.ToString().c_str());
  return ExitCodeFor(st);
}

// The job document (the file, or the live job's expanded spec as JSON) with --set applied.
StatusOr<JobSpec> ParseJob(const std::string& text, const std::string& origin,
                           const std::vector<std::string>& sets) {
  auto doc = ParseYaml(text, kJobDocumentLimits);
  if (!doc.ok()) return doc.status().WithPrefix(origin);
  for (const std::string& s : sets) {
    // Paths are under spec: unless they name another top-level section (metadata.priority=5).
    const bool top = s.rfind("spec.", 0) == 0 || s.rfind("metadata.", 0) == 0;
    MOE_RETURN_IF_ERROR(ApplyDocumentOverride(&*doc, top ? s : "spec." + s).WithPrefix("--set"));
  }
  auto spec = ParseJobSpec(*doc);
  if (!spec.ok()) return spec.status().WithPrefix(origin);
  return spec;
}

// The cluster: a name or path; `local` is this machine, probed, one rank's share of it; a live CPU
// job without --cluster is planned on `local` (its workers run here or on machines like it).
StatusOr<ClusterProfile> Cluster(const PlanArgs& a, const JobSpec& spec) {
  std::string name = a.cluster;
  if (name.empty()) {
    if (spec.resources.device != "cpu") {
      return InvalidArgumentError(
          "--cluster: required for a " + spec.resources.device +
          " job: name the system its workers are (gb300-nvl72, h200, ... or a YAML path)");
    }
    name = "local";
  }
  if (name != "local") return LoadClusterProfile(name);
  MOE_ASSIGN_OR_RETURN(const ClusterProfile machine, ProbeLocalCluster());
  return LocalProfileForRanks(machine, spec.parallelism.world_size);
}

// The plan, and the published runs nearest its layout beside it (what it can be held against).
void PrintPlans(const PlanArgs& a, const JobSpec& spec, const Plan& p, const Plan* packed) {
  const std::vector<PublishedRun> runs =
      NearestPublishedRuns(spec, p.cluster, 3, p.tensor_parallel);
  if (a.output == "json") {
    Node n = PlanToNode(p);
    if (packed != nullptr) n.Set("all_in_one_rack", PlanToNode(*packed));
    n.Set("published_runs", PublishedRunsNode(runs));
    std::printf("%s\n", ToJson(n, 2).c_str());
    return;
  }
  std::printf("%s", PlanTable(p).c_str());
  if (packed != nullptr) std::printf("%s", PlacementDifference(p, *packed).c_str());
  std::printf("%s", PublishedRunsText(runs, p.tflops_per_gpu).c_str());
}

// With no --software: which profile the answer rests on, and whether it was measured.
void SaySoftware(const SoftwareProfile& sw) {
  std::fprintf(stderr,
               "moectl plan: software profile %s (the cluster's default; --software names "
               "another): %s\n",
               sw.name.c_str(),
               sw.calibrated ? "calibrated against measured runs"
                             : "NOT calibrated: its efficiencies are estimates, never measured "
                               "on this hardware (docs/planning.md)");
}

// A layout that does not fit: the layouts of the same devices that do, fastest first (the sweep's
// ranking), on stderr, and exit status 7 so that a script stops there.
constexpr int kDoesNotFit = 7;  // beside ExitCodeFor's 3-6 (cli/client.cc)
int NotFitting(const JobSpec& spec, const ClusterProfile& cluster, const SoftwareProfile& software,
               const PlanOptions& options) {
  auto plans = SweepLayouts(spec, cluster, software, options, 100000);
  std::vector<Plan> fitting, faster_with_tp;
  if (plans.ok()) {
    for (const Plan& p : *plans) {
      if (p.fits && p.runnable && fitting.size() < 3) fitting.push_back(p);
      // The fastest that fits only with tensor parallelism the software does not run (ranked after
      // those it runs): shown when it beats them, marked.
      if (p.fits && !p.runnable && faster_with_tp.empty() &&
          (fitting.empty() || p.tflops_per_gpu > fitting.front().tflops_per_gpu)) {
        faster_with_tp.push_back(p);
      }
    }
  }
  if (fitting.empty()) {
    std::fprintf(stderr,
                 "moectl plan: the layout does not fit, and no layout of %lld devices does "
                 "(more devices: --gpus; a larger memory: another --cluster)\n",
                 static_cast<long long>(spec.parallelism.world_size));
  } else {
    std::fprintf(stderr,
                 "moectl plan: the layout does not fit; the nearest layouts of the same %lld "
                 "devices that do (fastest first; --sweep N lists more):\n%s",
                 static_cast<long long>(spec.parallelism.world_size), SweepTable(fitting).c_str());
  }
  if (!faster_with_tp.empty()) {
    std::fprintf(stderr, "moectl plan: %s with tensor parallelism, which %s does not run:\n%s",
                 fitting.empty() ? "it fits only" : "faster", software.name.c_str(),
                 SweepTable(faster_with_tp).c_str());
  }
  return kDoesNotFit;
}

int Sweep(const PlanArgs& a, const JobSpec& spec, const ClusterProfile& cluster,
          const SoftwareProfile& software, const PlanOptions& options, const std::string& scaling) {
  if (a.mtbf_hours != 0)
    std::fprintf(stderr, "moectl plan: --mtbf-hours: advice is for one plan, not a sweep\n");
  auto plans = SweepLayouts(spec, cluster, software, options, static_cast<size_t>(a.sweep));
  if (!plans.ok()) return Refuse(plans.status());
  if (a.output == "json") {
    Node list = Node::List();
    for (const Plan& p : *plans) list.Append(PlanToNode(p));
    std::printf("%s\n", ToJson(list, 2).c_str());
  } else {
    std::printf("sweep: %s on %s, software %s\n%s", spec.name.c_str(), cluster.name.c_str(),
                software.name.c_str(), SweepTable(*plans).c_str());
    if (!scaling.empty()) std::printf("gpus: %s\n", scaling.c_str());
  }
  return 0;
}

// --gpus: the job file's layout scaled by data parallelism (a live job keeps the ranks it holds).
Status ApplyGpus(const PlanArgs& a, JobSpec* spec, std::string* note) {
  if (a.gpus == 0) return OkStatus();
  if (a.live()) {
    return InvalidArgumentError("--gpus: plans a job file (-f) at another size, not job " + a.job +
                                " (it runs on the ranks it holds)");
  }
  MOE_ASSIGN_OR_RETURN(*spec, ScaleToGpus(*spec, a.gpus, a.scale_batch, note));
  return OkStatus();
}

// A live job: its spec and placement from the controller.
StatusOr<moe::v1::Job> FetchJob(Client* c, const std::string& id) {
  moe::v1::GetJobRequest req;
  req.set_id(id);
  moe::v1::Job job;
  MOE_RETURN_IF_ERROR(c->Call(&Stub::GetJob, req, &job));
  return job;
}

// A live job's MFU as its ranks report it (the last step's): the peak the run counts against.
std::optional<RunMfu> RunMfuOf(const moe::v1::Job& job) {
  const moe::v1::StepMetrics& m = job.last_metrics();
  if (!(m.mfu_peak_tflops() > 0)) return std::nullopt;
  return RunMfu{m.mfu_peak_tflops(),
                m.mfu_peak_source().empty() ? "no source reported" : m.mfu_peak_source(),
                m.tflops_per_device(), m.mfu()};
}

// A flag's value that must be a finite number > 0 (CLI11 names the flag in front of this).
CLI::Validator FinitePositive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (end != v.c_str() && *end == '\0' && d > 0 && std::isfinite(d)) return "";
        return "must be a finite number > 0, got '" + v + "'";
      },
      "> 0");
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* a) {
  auto* plan =
      app.add_subcommand("plan", "predict a job's memory, step time and TFLOP/s on a cluster");
  plan->add_option(
      "job", a->job,
      "a submitted job's id: plan it on the racks its ranks hold (asks the controller)");
  auto* file = plan->add_option("-f,--file", a->file, "job file (YAML or JSON): plan offline");
  file->excludes(plan->get_option("job"));
  plan->add_option("--cluster", a->cluster,
                   "cluster profile: local (this machine, probed), h100, h200, h800, b200, "
                   "gb200-nvl72, gb300-nvl72 or a "
                   "YAML path (a live CPU job: local by default)");
  plan->add_option("--software", a->software,
                   "software profile: ours (default on cuda), ours-cpu (default on cpu), "
                   "megatron-2025-11, megatron-2026, "
                   "deepseek-h800 or a path");
  plan->add_option("--set", a->sets,
                   "change the job: field.path=value (parallelism.expert_parallel=64)");
  plan->add_option("--switch", a->switches,
                   "change the software profile: key=value (dispatcher=nccl, host.cuda_graphs=[])");
  plan->add_option("--racks", a->racks,
                   "scale-up domains to spread the job over (default: as few as fit)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--ep-domains", a->ep_domains,
                   "domains one expert-parallel group spans (placement)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--tokens", a->tokens,
                   "token budget for days and GPU-hours (default: the job's steps)")
      ->check(CLI::PositiveNumber);
  auto* sweep = plan->add_option("--sweep", a->sweep,
                                 "rank the N best layouts of the job's world size (PP, VPP, EP, "
                                 "micro batch, recompute; TP where memory needs it, marked when "
                                 "the software runs none)")
                    ->check(CLI::PositiveNumber);
  auto* gpus = plan->add_option("--gpus", a->gpus,
                                "plan the job on N GPUs by data parallelism (PP, VPP, EP kept; the "
                                "global batch kept, or the nearest the layout runs, said)")
                   ->check(FinitePositive());
  plan->add_flag("--scale-batch", a->scale_batch,
                 "with --gpus: keep the batch per data-parallel replica instead, so the global "
                 "batch (and its ramp) scales with DP")
      ->needs(gpus);
  plan->add_option("--tensor-parallel,--tp", a->tensor_parallel,
                   "plan the layout with tensor parallelism TP (within a scale-up domain, dividing "
                   "the heads; this engine runs none yet: the plan says so)")
      ->check(CLI::PositiveNumber)
      ->excludes(sweep);
  plan->add_option("--mtbf-hours", a->mtbf_hours,
                   "a GPU's mean time between failures in hours (50000: the public planning "
                   "figure): advise the checkpoint interval (Young-Daly) and predict goodput")
      ->check(FinitePositive());
  plan->add_option("--checkpoint-save", a->checkpoint_save,
                   "async (the stall is the copy to host memory) | sync (the write to storage)")
      ->check(CLI::IsMember({"async", "sync"}))
      ->capture_default_str();
  plan->add_option("-o,--output", a->output, "table | json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  return plan;
}

int RunPlan(const PlanArgs& a, Client* client) {
  if (a.file.empty() && !a.live())
    return Refuse(InvalidArgumentError("expected -f FILE (offline) or a job id (live)"));
  moe::v1::Job job;
  std::string text = "", origin = a.file;
  if (a.live()) {
    auto got = FetchJob(client, a.job);
    if (!got.ok()) return client->Fail(got.status());
    job = *got;
    auto live = SpecFromProto(job.spec());
    if (!live.ok()) return Refuse(live.status().WithPrefix("job " + a.job));
    text = ToJson(JobSpecToNode(*live)), origin = "job " + a.job;
  } else {
    auto read = ReadFileToString(a.file);
    if (!read.ok()) return Refuse(read.status());
    text = *read;
  }
  auto spec = ParseJob(text, origin, a.sets);
  if (!spec.ok()) return Refuse(spec.status());
  std::string scaling;
  if (Status st = ApplyGpus(a, &*spec, &scaling); !st.ok()) return Refuse(st);
  auto cluster = Cluster(a, *spec);
  if (!cluster.ok()) return Refuse(cluster.status().WithPrefix("--cluster"));
  const std::string sw = !a.software.empty() ? a.software : DefaultSoftwareFor(*cluster);
  auto software = LoadSoftwareProfile(sw);
  if (!software.ok()) return Refuse(software.status().WithPrefix("--software"));
  for (const std::string& s : a.switches) {
    if (Status st = ApplySoftwareOverride(&*software, s); !st.ok()) return Refuse(st);
  }
  PlanOptions options{a.racks, a.ep_domains, a.tokens};
  options.tensor_parallel = a.tensor_parallel;
  if (a.sweep > 0) return Sweep(a, *spec, *cluster, *software, options, scaling);
  if (a.live()) options.run_mfu = RunMfuOf(job);
  if (a.mtbf_hours != 0) options.mtbf_hours = a.mtbf_hours;
  options.async_checkpoint = a.checkpoint_save == "async";
  const bool placed = a.live() && job.placement_size() > 0;
  if (a.live() && !placed)
    std::fprintf(stderr, "moectl plan: job %s has no placement yet: planned as packed\n",
                 a.job.c_str());
  if (placed && a.racks == 0 && a.ep_domains == 0) {
    std::vector<std::string> racks;
    for (const auto& r : job.placement())
      racks.push_back(r.rack());  // the controller lists them by rank
    const PlanOptions placed = PlacementOptions(racks, spec->parallelism.expert_parallel);
    options.racks = placed.racks, options.ep_domains = placed.ep_domains;
  }
  auto plan = PlanJob(*spec, *cluster, *software, options);
  if (!plan.ok()) return Refuse(plan.status());
  plan->scaling = scaling;
  const Plan* packed_plan = nullptr;
  StatusOr<Plan> packed = Plan{};
  if (placed) {
    PlanOptions packed_options = options;
    packed_options.ep_domains = 1;
    packed = PlanJob(*spec, *cluster, *software, packed_options);
    if (!packed.ok()) return Refuse(packed.status());
    packed_plan = &*packed;
  }
  PrintPlans(a, *spec, *plan, packed_plan);
  if (a.software.empty()) SaySoftware(*software);
  return plan->fits ? 0 : NotFitting(*spec, *cluster, *software, options);
}

}  // namespace moe::cli
