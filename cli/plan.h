// moectl plan: a job's memory, step time and TFLOP/s on a named cluster, offline (common/planner.h,
// docs/planning.md). Needs no controller.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace moe::cli {

struct PlanArgs {
  std::string file, cluster, software = "ours", output = "table";
  std::vector<std::string> sets, switches;
  int64_t racks = 0, ep_domains = 0, sweep = 0;
  double tokens = 0;
};

// Adds `plan` to `app`; the returned subcommand is parsed when the user asked for it.
CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* a);
int RunPlan(const PlanArgs& a);

}  // namespace moe::cli
