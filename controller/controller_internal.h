// Helpers shared by controller.cc and attempt_lifecycle.cc: one way to build each of these.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/rank_layout.h"
#include "controller/scheduler.h"
#include "moe/v1/job.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller::internal {

// What placing `spec` asks for (without a previous placement).
inline PlacementRequest RequestFor(const JobSpec& spec) {
  PlacementRequest req;
  req.world_size = static_cast<int>(spec.parallelism.world_size);
  req.expert_parallel = static_cast<int>(spec.parallelism.expert_parallel);
  req.within = spec.placement.expert_group_within;
  req.device_type = spec.resources.device;
  return req;
}

// The job's current placement, in rank order.
inline std::vector<Slot> SlotsOf(const moe::v1::Job& job) {
  std::vector<Slot> slots;
  for (const auto& p : job.placement()) {
    slots.push_back({p.worker(), p.rack(), p.node(), p.device()});
  }
  return slots;
}

// Writes `slots` (rank order) as the job's placement, with each rank's (pp, dp, ep) coordinates in
// the spec's layout `par` (an elastic attempt's world is its slots).
inline void SetPlacement(moe::v1::Job& job, const ParallelismConfig& par,
                         const std::vector<Slot>& slots) {
  job.clear_placement();
  const int world = static_cast<int>(slots.size());
  const int pp = std::max(1, static_cast<int>(par.pipeline_parallel));
  const int ep = std::max(1, static_cast<int>(par.expert_parallel));
  for (size_t r = 0; r < slots.size(); ++r) {
    auto* p = job.add_placement();
    const int rank = static_cast<int>(r);
    const RankCoordinates at = RankLayout(rank, world, pp, ep);
    p->set_rank(rank);
    p->set_pp(at.pp);
    p->set_dp(at.dp);
    p->set_ep(at.ep);
    p->set_worker(slots[r].worker);
    p->set_rack(slots[r].rack);
    p->set_node(slots[r].node);
    p->set_device(slots[r].device);
  }
}

// "2 in rack r0, 1 in rack r1".
inline std::string RackSummary(const std::vector<Slot>& slots) {
  std::map<std::string, int> per_rack;
  for (const auto& s : slots) per_rack[s.rack]++;
  std::string out;
  for (const auto& [rack, n] : per_rack) {
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " in rack " + rack;
  }
  return out;
}

inline moe::v1::ControllerMessage CancelMessage(const std::string& job_id, int attempt,
                                                const std::string& reason, bool now = false) {
  moe::v1::ControllerMessage m;
  m.mutable_cancel()->set_job_id(job_id);
  m.mutable_cancel()->set_attempt(attempt);
  m.mutable_cancel()->set_reason(reason);
  m.mutable_cancel()->set_now(now);
  return m;
}

// A wait for people: "10 s", "2.5 s".
inline std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf),
                s == static_cast<double>(static_cast<int64_t>(s)) ? "%.0f s" : "%.1f s", s);
  return buf;
}

// Where an attempt's ranks keep their rendezvous keys.
inline std::string RendezvousPrefix(const std::string& job_id, int attempt) {
  return "job/" + job_id + "/attempt/" + std::to_string(attempt) + "/";
}

}  // namespace moe::controller::internal
