// moectl plan: a job's memory, step time and TFLOP/s on a named cluster (planner/planner.h,
// docs/planning.md).
//
//   moectl plan -f job.yaml --cluster NAME ...   offline: needs no controller
//   moectl plan JOB [--cluster NAME] ...         a submitted or running job, planned on the racks
//   its
//                                                ranks actually hold, against all-in-one-rack
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/client.h"

namespace moe::cli {

struct PlanArgs {
  std::string job, file, cluster, software, output = "table";
  std::vector<std::string> sets, switches;
  int64_t racks = 0, ep_domains = 0, sweep = 0;
  double tokens = 0;
  int64_t gpus = 0;             // --gpus: the job scaled by data parallelism; 0: its own world size
  bool scale_batch = false;     // --scale-batch: --gpus scales the global batch with DP
  int64_t tensor_parallel = 1;  // --tensor-parallel: a planner layout (the job spec has no TP)
  double mtbf_hours = 0;        // --mtbf-hours: per device; checkpoint advice; 0: none
  std::string checkpoint_save = "async";  // --checkpoint-save: async | sync
  bool live() const { return !job.empty(); }
};

// Adds `plan` to `app`; the returned subcommand is parsed when the user asked for it.
CLI::App* AddPlanCommand(CLI::App& app, PlanArgs* a);
// `client` is connected when a.live(), else unused.
int RunPlan(const PlanArgs& a, Client* client);

}  // namespace moe::cli
