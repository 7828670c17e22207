#include "cli/plan.h"

#include <cstdio>

#include "cli/client.h"
#include "common/file_util.h"
#include "common/planner.h"

namespace moe::cli {
namespace {

int Refuse(const Status& st) {
  std::fprintf(stderr, "moectl plan: %s\n", st.ToString().c_str());
  return ExitCodeFor(st);
}

StatusOr<JobSpec> ReadJob(const PlanArgs& a) {
  MOE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(a.file));
  auto doc = ParseYaml(text);
  if (!doc.ok()) return doc.status().WithPrefix(a.file);
  for (const std::string& s : a.sets) {
    // Paths are under spec: unless they name another top-level section (metadata.priority=5).
    const bool top = s.rfind("spec.", 0) == 0 || s.rfind("metadata.", 0) == 0;
    MOE_RETURN_IF_ERROR(ApplyDocumentOverride(&*doc, top ? s : "spec." + s).WithPrefix("--set"));
  }
  auto spec = ParseJobSpec(*doc);
  if (!spec.ok()) return spec.status().WithPrefix(a.file);
  return spec;
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* a) {
  auto* plan = app.add_subcommand("plan", "predict a job's memory, step time and TFLOP/s on a cluster (offline)");
  plan->add_option("-f,--file", a->file, "job file (YAML or JSON)")->required();
  plan->add_option("--cluster", a->cluster, "cluster profile: h100, h200, h800, b200, gb200-nvl72, gb300-nvl72 or a YAML path")
      ->required();
  plan->add_option("--software", a->software, "software profile: ours, megatron-2025-11, megatron-2026, deepseek-h800 or a path")
      ->capture_default_str();
  plan->add_option("--set", a->sets, "change the job: field.path=value (parallelism.expert_parallel=64)");
  plan->add_option("--switch", a->switches, "change the software profile: key=value (dispatcher=nccl, host.cuda_graphs=[])");
  plan->add_option("--racks", a->racks, "scale-up domains to spread the job over (default: as few as fit)")->check(CLI::PositiveNumber);
  plan->add_option("--ep-domains", a->ep_domains, "domains one expert-parallel group spans (placement)")->check(CLI::PositiveNumber);
  plan->add_option("--tokens", a->tokens, "token budget for days and GPU-hours (default: the job's steps)")->check(CLI::PositiveNumber);
  plan->add_option("--sweep", a->sweep, "rank the N best layouts of the job's world size (PP, VPP, EP, micro batch, recompute)")
      ->check(CLI::PositiveNumber);
  plan->add_option("-o,--output", a->output, "table | json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  return plan;
}

int RunPlan(const PlanArgs& a) {
  auto spec = ReadJob(a);
  if (!spec.ok()) return Refuse(spec.status());
  auto cluster = LoadClusterProfile(a.cluster);
  if (!cluster.ok()) return Refuse(cluster.status().WithPrefix("--cluster"));
  auto software = LoadSoftwareProfile(a.software);
  if (!software.ok()) return Refuse(software.status().WithPrefix("--software"));
  for (const std::string& s : a.switches) {
    if (Status st = ApplySoftwareOverride(&*software, s); !st.ok()) return Refuse(st);
  }
  const PlanOptions options{a.racks, a.ep_domains, a.tokens};
  if (a.sweep > 0) {
    auto plans = SweepLayouts(*spec, *cluster, *software, options, static_cast<size_t>(a.sweep));
    if (!plans.ok()) return Refuse(plans.status());
    if (a.output == "json") {
      Node list = Node::List();
      for (const Plan& p : *plans) list.Append(PlanToNode(p));
      std::printf("%s\n", ToJson(list, 2).c_str());
    } else {
      std::printf("sweep: %s on %s, software %s\n%s", spec->name.c_str(), cluster->name.c_str(), software->name.c_str(),
                  SweepTable(*plans).c_str());
    }
    return 0;
  }
  auto plan = PlanJob(*spec, *cluster, *software, options);
  if (!plan.ok()) return Refuse(plan.status());
  std::printf("%s", a.output == "json" ? (ToJson(PlanToNode(*plan), 2) + "\n").c_str() : PlanTable(*plan).c_str());
  return 0;
}

}  // namespace moe::cli
