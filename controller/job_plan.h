// The planner (planner/planner.h) at scheduling time: an attempt's step time as planned for the
// racks its ranks were given, stored in the job record (Job.planned_step_seconds) and exported next
// to the measured one, so a job running far below its plan shows (docs/planning.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "controller/config.h"
#include "controller/scheduler.h"

namespace moe::controller {

struct AttemptPlan {
  double step_seconds = 0;
  std::string basis;  // "local / ours-cpu, EP groups over 1 domain(s)"
};

// Nothing when the controller has no --plan-cluster, or when the job cannot be planned on it (the
// reason is logged once per attempt).
std::optional<AttemptPlan> PlanAttempt(const ControllerConfig& config, const JobSpec& spec,
                                       const std::vector<Slot>& slots);

}  // namespace moe::controller
