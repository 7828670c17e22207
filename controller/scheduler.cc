#include "controller/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

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

// (rack, node, device index, device, worker), compared in place (no copies: the hot path of
// placement).
bool SlotLess(const Slot& a, const Slot& b) {
  if (const int c = a.rack.compare(b.rack); c != 0) return c < 0;
  if (const int c = a.node.compare(b.node); c != 0) return c < 0;
  const int da = DeviceIndex(a.device), db = DeviceIndex(b.device);
  if (da != db) return da < db;
  return std::tie(a.device, a.worker) < std::tie(b.device, b.worker);
}

Status CheckShape(const PlacementRequest& req) {
  if (req.world_size < 1 || req.expert_parallel < 1 || req.world_size % req.expert_parallel != 0) {
    return InvalidArgumentError("world_size " + std::to_string(req.world_size) +
                                " is not a multiple of expert_parallel " +
                                std::to_string(req.expert_parallel));
  }
  if (req.within != "rack" && req.within != "node" && req.within != "any") {
    return InvalidArgumentError("placement must be rack, node or any, got '" + req.within + "'");
  }
  return OkStatus();
}

// The domains (racks, nodes, or one for "any") of the slots `idx` of `slots`, interned: a domain is
// a (rack, node) pair of views into the slots, hashed, so grouping costs no string copies or sort
// of the whole free list (the placement benchmark: 87,720 free slots).
struct DomainKey {
  std::string_view rack, node;
  bool operator==(const DomainKey&) const = default;
};
struct DomainHash {
  size_t operator()(const DomainKey& k) const {
    return std::hash<std::string_view>()(k.rack) * 1000003u ^ std::hash<std::string_view>()(k.node);
  }
};
struct Domain {
  DomainKey key;
  std::vector<int> members;  // indices into the slots
};

std::vector<Domain> GroupByDomain(const std::vector<Slot>& slots, const std::vector<int>& idx,
                                  const std::string& within) {
  std::unordered_map<DomainKey, int, DomainHash> index;
  std::vector<Domain> out;
  for (const int i : idx) {
    const Slot& s = slots[static_cast<size_t>(i)];
    const DomainKey key = within == "rack"   ? DomainKey{s.rack, {}}
                          : within == "node" ? DomainKey{s.rack, s.node}
                                             : DomainKey{};
    const auto [it, fresh] = index.emplace(key, static_cast<int>(out.size()));
    if (fresh) out.push_back({key, {}});
    out[static_cast<size_t>(it->second)].members.push_back(i);
  }
  return out;
}

bool KeyLess(const DomainKey& a, const DomainKey& b) {
  return std::tie(a.rack, a.node) < std::tie(b.rack, b.node);
}

// Which domains give how many groups: the smallest that holds them all (best fit, leaving big
// domains whole), else the largest first; in rank order (by domain name). Empty when they do not
// fit.
std::vector<std::pair<const Domain*, int>> ChooseDomains(const std::vector<Domain>& domains,
                                                         int groups, int ep) {
  const Domain* best = nullptr;
  int total = 0;
  auto groups_in = [ep](const Domain& d) { return static_cast<int>(d.members.size()) / ep; };
  for (const Domain& d : domains) {
    const int c = groups_in(d);
    total += c;
    if (c < groups) continue;
    if (best == nullptr || c < groups_in(*best) ||
        (c == groups_in(*best) && KeyLess(d.key, best->key)))
      best = &d;
  }
  std::vector<std::pair<const Domain*, int>> take;
  if (total < groups) return take;
  if (best != nullptr) return {{best, groups}};
  std::vector<const Domain*> order;
  for (const Domain& d : domains)
    if (groups_in(d) > 0) order.push_back(&d);
  std::sort(order.begin(), order.end(), [&](const Domain* a, const Domain* b) {
    const int ca = groups_in(*a), cb = groups_in(*b);
    return ca > cb || (ca == cb && KeyLess(a->key, b->key));
  });
  for (int left = groups; const Domain* d : order) {
    if (left == 0) break;
    const int n = std::min(groups_in(*d), left);
    take.emplace_back(d, n);
    left -= n;
  }
  std::sort(take.begin(), take.end(),
            [](const auto& a, const auto& b) { return KeyLess(a.first->key, b.first->key); });
  return take;
}

// Groups of EP slots from domains, packed; empty when they do not fit. Only the chosen domains'
// slots are ordered (rack, node, device) and copied.
std::vector<Slot> PackFresh(const PlacementRequest& req, const std::vector<Slot>& slots,
                            const std::vector<int>& idx) {
  const int groups = req.world_size / req.expert_parallel, ep = req.expert_parallel;
  const std::vector<Domain> domains = GroupByDomain(slots, idx, req.within);
  const auto take = ChooseDomains(domains, groups, ep);
  if (take.empty()) return {};
  auto less = [&](int a, int b) {
    return SlotLess(slots[static_cast<size_t>(a)], slots[static_cast<size_t>(b)]);
  };
  std::vector<Slot> out;
  out.reserve(static_cast<size_t>(req.world_size));
  for (const auto& [d, n] : take) {
    std::vector<int> members = d->members;
    const auto end = members.begin() + static_cast<long>(n) * ep;
    std::partial_sort(members.begin(), end, members.end(), less);
    for (auto it = members.begin(); it != end; ++it) out.push_back(slots[static_cast<size_t>(*it)]);
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
  for (const auto& s : free)
    if (!taken.count(s.worker)) spare.push_back(s);
  std::sort(spare.begin(), spare.end(), SlotLess);
  for (int r : missing) {
    // The domain of the rank's group: where its surviving members are (else where it was).
    const int g0 = r / req.expert_parallel * req.expert_parallel;
    std::string domain = DomainOf(req.previous[static_cast<size_t>(r)], req.within);
    for (int m = g0; m < g0 + req.expert_parallel; ++m) {
      if (!out[static_cast<size_t>(m)].worker.empty()) {
        domain = DomainOf(out[static_cast<size_t>(m)], req.within);
        break;
      }
    }
    // Prefer the lost slot's own node, then its rack (NVLink domain: what within=any or node may
    // still keep), then anywhere in the domain.
    const Slot& lost = req.previous[static_cast<size_t>(r)];
    auto pick = spare.end();
    int best = -1;
    for (auto it = spare.begin(); it != spare.end() && best < 2; ++it) {
      if (DomainOf(*it, req.within) != domain) continue;
      const int near = it->node == lost.node ? 2 : it->rack == lost.rack ? 1 : 0;
      if (near > best) pick = it, best = near;
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

std::vector<Slot> WithoutSpares(const PlacementRequest& req, const std::vector<Slot>& slots) {
  if (req.spares_per_rack <= 0) return slots;
  std::unordered_set<std::string_view> previous;
  for (const Slot& s : req.previous) previous.insert(s.worker);
  std::unordered_map<std::string_view, std::vector<int>> by_rack;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (DeviceMatches(slots[i].device, req.device_type))
      by_rack[slots[i].rack].push_back(static_cast<int>(i));
  }
  // Kept first: the previous placement's slots, then rank order; the last ones are held back.
  auto kept_first = [&](int a, int b) {
    const Slot &sa = slots[static_cast<size_t>(a)], &sb = slots[static_cast<size_t>(b)];
    const bool pa = previous.count(sa.worker) > 0, pb = previous.count(sb.worker) > 0;
    return pa != pb ? pa : SlotLess(sa, sb);
  };
  std::vector<bool> held(slots.size(), false);
  for (auto& [rack, members] : by_rack) {
    const size_t n = std::min(members.size(), static_cast<size_t>(req.spares_per_rack));
    std::sort(members.begin(), members.end(), kept_first);
    for (size_t k = members.size() - n; k < members.size(); ++k)
      held[static_cast<size_t>(members[k])] = true;
  }
  std::vector<Slot> out;
  out.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    if (!held[i]) out.push_back(slots[i]);
  return out;
}

namespace {
// "" without spares, else what the counts above left out.
std::string SparesNote(const PlacementRequest& req) {
  if (req.spares_per_rack <= 0) return "";
  return " (" + std::to_string(req.spares_per_rack) + " " + req.device_type +
         " worker(s) of each rack held back as spares: moe-controller --spares-per-rack)";
}

bool MemoryFits(const Slot& s, const PlacementRequest& req) {
  if (req.min_memory <= 0) return true;
  return s.memory > 0 ? s.memory >= req.min_memory : req.unknown_memory_ok;
}

// The slots of the request's device type with the memory a rank needs.
std::vector<int> Matching(const std::vector<Slot>& slots, const PlacementRequest& req) {
  std::vector<int> out;
  out.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (DeviceMatches(slots[i].device, req.device_type) && MemoryFits(slots[i], req))
      out.push_back(static_cast<int>(i));
  }
  return out;
}

std::string Gb(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return b;
}

// Why the slots of the device type that lack memory do not count: "" when none lacks any.
std::string MemoryShortfall(const std::vector<Slot>& all, const PlacementRequest& req) {
  int short_of = 0, unknown = 0;
  int64_t roomiest = 0;
  for (const Slot& s : all) {
    if (!DeviceMatches(s.device, req.device_type) || MemoryFits(s, req)) continue;
    s.memory > 0 ? ++short_of : ++unknown;
    roomiest = std::max(roomiest, s.memory);
  }
  if (short_of + unknown == 0) return "";
  std::string why = "; " + std::to_string(short_of + unknown) + " more lack the " +
                    Gb(req.min_memory) + " a rank needs (moe-train --describe)";
  if (short_of > 0) why += ": the roomiest has " + Gb(roomiest);
  if (unknown > 0)
    why += (short_of > 0 ? ", " : ": ") + std::to_string(unknown) +
           " report no memory (moe-worker --memory-gb, or moe-controller "
           "--allow-workers-without-memory)";
  return why;
}
}  // namespace

StatusOr<std::vector<Slot>> Place(const PlacementRequest& req, const std::vector<Slot>& free_in) {
  MOE_RETURN_IF_ERROR(CheckShape(req));
  std::vector<Slot> unheld;  // a copy only when spares are held back (87,720 free slots: bench)
  if (req.spares_per_rack > 0) unheld = WithoutSpares(req, free_in);
  const std::vector<Slot>& free_all = req.spares_per_rack > 0 ? unheld : free_in;
  const std::vector<int> match = Matching(free_all, req);
  if (!req.previous.empty()) {
    std::vector<Slot> free;
    for (const int i : match) free.push_back(free_all[static_cast<size_t>(i)]);
    auto kept = Refill(req, free);
    if (!kept.empty()) return kept;
  }
  if (static_cast<int>(match.size()) < req.world_size) {
    return ResourceExhaustedError("needs " + std::to_string(req.world_size) + " free " +
                                  req.device_type + " workers, " + std::to_string(match.size()) +
                                  " are free" + SparesNote(req));
  }
  auto out = PackFresh(req, free_all, match);
  if (out.empty()) {
    return ResourceExhaustedError("not enough free workers in one " + req.within +
                                  " for each expert-parallel group of " +
                                  std::to_string(req.expert_parallel) + SparesNote(req));
  }
  return out;
}

Status CheckFeasible(const PlacementRequest& req, const std::vector<Slot>& all_in) {
  MOE_RETURN_IF_ERROR(CheckShape(req));
  std::vector<Slot> unheld;
  if (req.spares_per_rack > 0) unheld = WithoutSpares(req, all_in);
  const std::vector<Slot>& all = req.spares_per_rack > 0 ? unheld : all_in;
  const std::vector<int> matching = Matching(all, req);
  if (static_cast<int>(matching.size()) < req.world_size) {
    return FailedPreconditionError(
        "the job needs " + std::to_string(req.world_size) + " " + req.device_type +
        " workers and the cluster has " + std::to_string(matching.size()) + " (" +
        std::to_string(req.world_size - static_cast<int>(matching.size())) + " more" +
        MemoryShortfall(all, req) + ")" + SparesNote(req));
  }
  if (PackFresh(req, all, matching).empty()) {
    return FailedPreconditionError(
        "no placement keeps every expert-parallel group of " + std::to_string(req.expert_parallel) +
        " inside one " + req.within + ": the cluster's " + req.within + "s are too small for " +
        std::to_string(req.world_size / req.expert_parallel) + " such groups" + SparesNote(req));
  }
  return OkStatus();
}

std::vector<QueuedJob> QueueOrder(std::vector<QueuedJob> jobs) {
  // Higher priority first, compared as is: negating INT64_MIN overflows.
  std::sort(jobs.begin(), jobs.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return std::tie(a.submitted_at, a.id) < std::tie(b.submitted_at, b.id);  // no id copied
  });
  return jobs;
}

}  // namespace moe::controller
