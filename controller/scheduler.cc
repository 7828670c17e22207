#include "controller/scheduler.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace moe::controller {
namespace {

std::string DomainOf(const Slot& s, const std::string& within) {
  if (within == "rack") return s.rack;
  if (within == "node") return s.rack + "\x1f" + s.node;
  return "";
}

int DeviceIndex(const std::string& device) {
  const auto colon = device.find(':');
  return colon == std::string::npos ? 0 : std::atoi(device.c_str() + colon + 1);
}

bool SlotLess(const Slot& a, const Slot& b) {
  return std::make_tuple(a.rack, a.node, DeviceIndex(a.device), a.device, a.worker) <
         std::make_tuple(b.rack, b.node, DeviceIndex(b.device), b.device, b.worker);
}

Status CheckShape(const PlacementRequest& req) {
  if (req.world_size < 1 || req.expert_parallel < 1 || req.world_size % req.expert_parallel != 0) {
    return InvalidArgumentError("world_size " + std::to_string(req.world_size) + " is not a multiple of expert_parallel " +
                                std::to_string(req.expert_parallel));
  }
  if (req.within != "rack" && req.within != "node" && req.within != "any") {
    return InvalidArgumentError("placement must be rack, node or any, got '" + req.within + "'");
  }
  return OkStatus();
}

// Groups of EP slots from domains, packed; empty when they do not fit.
std::vector<Slot> PackFresh(const PlacementRequest& req, std::vector<Slot> free) {
  const int groups = req.world_size / req.expert_parallel, ep = req.expert_parallel;
  std::sort(free.begin(), free.end(), SlotLess);
  std::map<std::string, std::vector<Slot>> domains;
  for (auto& s : free) domains[DomainOf(s, req.within)].push_back(std::move(s));
  // Capacity in whole groups per domain.
  std::vector<std::pair<int, std::string>> cap;
  int total = 0;
  for (const auto& [name, slots] : domains) {
    const int c = static_cast<int>(slots.size()) / ep;
    if (c > 0) cap.emplace_back(c, name);
    total += c;
  }
  if (total < groups) return {};
  std::vector<std::string> chosen;
  // Best fit: the smallest domain that holds everything.
  const std::pair<int, std::string>* best = nullptr;
  for (const auto& c : cap) {
    if (c.first >= groups && (best == nullptr || c.first < best->first || (c.first == best->first && c.second < best->second))) best = &c;
  }
  std::vector<std::pair<std::string, int>> take;  // domain, groups taken there
  if (best != nullptr) {
    take.emplace_back(best->second, groups);
  } else {
    std::sort(cap.begin(), cap.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    int left = groups;
    for (const auto& [c, name] : cap) {
      if (left == 0) break;
      const int n = std::min(c, left);
      take.emplace_back(name, n);
      left -= n;
    }
  }
  std::sort(take.begin(), take.end());  // rank order follows (rack, node) of the domains
  std::vector<Slot> out;
  out.reserve(static_cast<size_t>(req.world_size));
  for (const auto& [name, n] : take) {
    const auto& slots = domains[name];
    out.insert(out.end(), slots.begin(), slots.begin() + static_cast<long>(n) * ep);
  }
  if (req.within == "any") std::sort(out.begin(), out.end(), SlotLess);
  return out;
}

// Keeps the previous placement's free workers at their ranks and refills the others inside each
// group's domain. Empty when that is not possible.
std::vector<Slot> Refill(const PlacementRequest& req, const std::vector<Slot>& free) {
  if (static_cast<int>(req.previous.size()) != req.world_size) return {};
  std::map<std::string, const Slot*> by_worker;
  for (const auto& s : free) by_worker[s.worker] = &s;
  std::vector<Slot> out(req.previous.size());
  std::vector<bool> used_missing;
  std::map<std::string, bool> taken;
  std::vector<int> missing;
  for (size_t r = 0; r < req.previous.size(); ++r) {
    auto it = by_worker.find(req.previous[r].worker);
    if (it != by_worker.end()) {
      out[r] = *it->second;
      taken[it->first] = true;
    } else {
      missing.push_back(static_cast<int>(r));
    }
  }
  if (missing.empty()) return out;
  std::vector<Slot> spare;
  for (const auto& s : free) if (!taken.count(s.worker)) spare.push_back(s);
  std::sort(spare.begin(), spare.end(), SlotLess);
  for (int r : missing) {
    // The domain of the rank's group: where its surviving members are (else where it was).
    const int g0 = r / req.expert_parallel * req.expert_parallel;
    std::string domain = DomainOf(req.previous[static_cast<size_t>(r)], req.within);
    for (int m = g0; m < g0 + req.expert_parallel; ++m) {
      if (!out[static_cast<size_t>(m)].worker.empty()) { domain = DomainOf(out[static_cast<size_t>(m)], req.within); break; }
    }
    // Prefer the lost slot's own node, then anywhere in the domain.
    auto pick = spare.end();
    for (auto it = spare.begin(); it != spare.end(); ++it) {
      if (DomainOf(*it, req.within) != domain) continue;
      if (it->node == req.previous[static_cast<size_t>(r)].node) { pick = it; break; }
      if (pick == spare.end()) pick = it;
    }
    if (pick == spare.end()) return {};
    out[static_cast<size_t>(r)] = *pick;
    spare.erase(pick);
  }
  return out;
}

}  // namespace

bool DeviceMatches(const std::string& device, const std::string& type) {
  if (type == "cpu") return device == "cpu";
  return device.rfind(type, 0) == 0;
}

StatusOr<std::vector<Slot>> Place(const PlacementRequest& req, const std::vector<Slot>& free_all) {
  MOE_RETURN_IF_ERROR(CheckShape(req));
  std::vector<Slot> free;
  free.reserve(free_all.size());
  for (const auto& s : free_all) if (DeviceMatches(s.device, req.device_type)) free.push_back(s);
  if (!req.previous.empty()) {
    auto kept = Refill(req, free);
    if (!kept.empty()) return kept;
  }
  if (static_cast<int>(free.size()) < req.world_size) {
    return ResourceExhaustedError("needs " + std::to_string(req.world_size) + " free " + req.device_type + " workers, " +
                                  std::to_string(free.size()) + " are free");
  }
  auto out = PackFresh(req, std::move(free));
  if (out.empty()) {
    return ResourceExhaustedError("not enough free workers in one " + req.within + " for each expert-parallel group of " +
                                  std::to_string(req.expert_parallel));
  }
  return out;
}

Status CheckFeasible(const PlacementRequest& req, const std::vector<Slot>& all) {
  MOE_RETURN_IF_ERROR(CheckShape(req));
  PlacementRequest fresh = req;
  fresh.previous.clear();
  std::vector<Slot> matching;
  for (const auto& s : all) if (DeviceMatches(s.device, req.device_type)) matching.push_back(s);
  if (static_cast<int>(matching.size()) < req.world_size) {
    return FailedPreconditionError("the job needs " + std::to_string(req.world_size) + " " + req.device_type +
                                   " workers and the cluster has " + std::to_string(matching.size()) + " (" +
                                   std::to_string(req.world_size - static_cast<int>(matching.size())) + " more)");
  }
  if (PackFresh(fresh, matching).empty()) {
    return FailedPreconditionError("no placement keeps every expert-parallel group of " + std::to_string(req.expert_parallel) +
                                   " inside one " + req.within + ": the cluster's " + req.within +
                                   "s are too small for " + std::to_string(req.world_size / req.expert_parallel) + " such groups");
  }
  return OkStatus();
}

std::vector<QueuedJob> QueueOrder(std::vector<QueuedJob> jobs) {
  // Higher priority first, compared as is: negating INT64_MIN overflows.
  std::sort(jobs.begin(), jobs.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return std::make_tuple(a.submitted_at, a.id) < std::make_tuple(b.submitted_at, b.id);
  });
  return jobs;
}

}  // namespace moe::controller
