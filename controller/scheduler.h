// Placement: which workers run a job's ranks. Pure functions over value types, so property tests
// and the placement benchmark call them directly.
//
// Gang: all W ranks or none. Expert-parallel groups are EP consecutive ranks and each must stay
// inside one domain (a rack, i.e. an NVLink domain; or a node; or anywhere). Placement packs: when
// one domain can hold every group, the smallest such domain is used (best fit, leaving big domains
// whole); otherwise domains with the most room are filled first (fewest domains). Ranks are ordered
// by (rack, node, device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::controller {

struct Slot {
  std::string worker;
  std::string rack;
  std::string node;
  std::string device;  // "cpu" or "cuda:N"
  int64_t memory = 0;  // bytes one rank on it may use (WorkerRegistry::MemoryFor); 0: not reported
};

struct PlacementRequest {
  int world_size = 1;
  int expert_parallel = 1;
  std::string within = "rack";      // rack | node | any
  std::string device_type = "cpu";  // cpu | cuda
  // The previous attempt's placement (rank order): survivors keep their ranks when the lost slots
  // can be refilled inside their groups' domains.
  std::vector<Slot> previous;
  // Bytes one rank needs (common/memory_model.h; 0: no estimate): only slots with that much memory
  // take a rank, and slots that report none only when `unknown_memory_ok` (the operator's opt-in).
  int64_t min_memory = 0;
  bool unknown_memory_ok = false;
  // Slots of the device type held back in each rack (moe-controller --spares-per-rack): placement
  // sees each rack's free (or, for CheckFeasible, live) slots of the type less this many. 0 for a
  // restart that lost a worker: it may take the spares (QueueScheduler::Request).
  int spares_per_rack = 0;
};

// True when `device` ("cpu", "cuda:3") is of `type` ("cpu", "cuda").
bool DeviceMatches(const std::string& device, const std::string& type);

// `slots` less `req.spares_per_rack` of `req.device_type` in each rack (all of a rack's when it has
// no more): the ones a placement may use. Held back first: slots outside `req.previous`, then the
// last in rank order. The others keep their order.
std::vector<Slot> WithoutSpares(const PlacementRequest& req, const std::vector<Slot>& slots);

// Chooses W slots among `free` (rank order) or says why it cannot now (RESOURCE_EXHAUSTED).
StatusOr<std::vector<Slot>> Place(const PlacementRequest& req, const std::vector<Slot>& free);

// Whether the job could ever fit on these workers (all registered ones, busy or not); the reason
// when it cannot (FAILED_PRECONDITION).
Status CheckFeasible(const PlacementRequest& req, const std::vector<Slot>& all);

struct JobEntry;  // job_manager.h
struct QueuedJob {
  std::string id;
  int64_t priority = 0;
  double submitted_at = 0;
  JobEntry* entry = nullptr;  // the job's, for the caller (not looked up again by id)
};
// Queue order: higher priority first, then earlier submission, then id.
std::vector<QueuedJob> QueueOrder(std::vector<QueuedJob> jobs);

}  // namespace moe::controller
