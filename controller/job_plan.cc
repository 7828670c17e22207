#include "controller/job_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/log.h"
#include "common/planner.h"

namespace moe::controller {

std::optional<AttemptPlan> PlanAttempt(const ControllerConfig& config, const JobSpec& spec, const std::vector<Slot>& slots) {
  if (!config.plan_cluster || !config.plan_software || slots.empty()) return std::nullopt;
  const int64_t world = static_cast<int64_t>(slots.size());
  const ClusterProfile cluster =
      config.plan_cluster_is_machine ? LocalProfileForRanks(*config.plan_cluster, world) : *config.plan_cluster;
  // The racks the ranks hold; expert-parallel groups are consecutive blocks of EP ranks.
  const int64_t ep = std::max<int64_t>(spec.parallelism.expert_parallel, 1);
  std::set<std::string> racks;
  std::map<int64_t, std::set<std::string>> groups;
  for (size_t r = 0; r < slots.size(); ++r) {
    racks.insert(slots[r].rack);
    groups[static_cast<int64_t>(r) / ep].insert(slots[r].rack);
  }
  PlanOptions o;
  o.racks = static_cast<int64_t>(racks.size());
  for (const auto& [g, in] : groups) o.ep_domains = std::max<int64_t>(o.ep_domains, static_cast<int64_t>(in.size()));
  auto plan = PlanJob(spec, cluster, *config.plan_software, o);
  if (!plan.ok()) {
    MOE_LOG(WARNING) << "job " << spec.name << ": no planned step time on " << cluster.name << ": " << plan.status();
    return std::nullopt;
  }
  AttemptPlan a;
  a.step_seconds = plan->step_seconds;
  a.basis = cluster.name + " / " + config.plan_software->name + ", " + std::to_string(o.racks) +
            " domain(s), EP groups over " + std::to_string(o.ep_domains);
  return a;
}

}  // namespace moe::controller
