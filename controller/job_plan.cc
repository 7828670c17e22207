#include "controller/job_plan.h"

#include "common/log.h"
#include "planner/planner.h"

namespace moe::controller {

std::optional<AttemptPlan> PlanAttempt(const ControllerConfig& config, const JobSpec& spec,
                                       const std::vector<Slot>& slots) {
  if (!config.plan_cluster || !config.plan_software || slots.empty()) return std::nullopt;
  const int64_t world = static_cast<int64_t>(slots.size());
  const ClusterProfile cluster = config.plan_cluster_is_machine
                                     ? LocalProfileForRanks(*config.plan_cluster, world)
                                     : *config.plan_cluster;
  std::vector<std::string> racks;
  for (const Slot& slot : slots) racks.push_back(slot.rack);
  const PlanOptions o = PlacementOptions(racks, spec.parallelism.expert_parallel);
  auto plan = PlanJob(spec, cluster, *config.plan_software, o);
  if (!plan.ok()) {
    MOE_LOG(WARNING) << "job " << spec.name << ": no planned step time on " << cluster.name << ": "
                     << plan.status();
    return std::nullopt;
  }
  AttemptPlan a;
  a.step_seconds = plan->step_seconds;
  a.basis = cluster.name + " / " + config.plan_software->name + ", " + std::to_string(o.racks) +
            " domain(s), EP groups over " + std::to_string(o.ep_domains);
  return a;
}

}  // namespace moe::controller
