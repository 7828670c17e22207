// Which running jobs a queued job preempts: a pure function of a snapshot (Kueue's GetTargets, then
// fillBackWorkloads), so that a decision is made whole before anything live changes, and tested on
// its own (tests/controller/preemption_test.cc). The scheduling pass (queue_scheduler.cc) builds
// the snapshot, calls ChooseVictims and then stops the victims it returned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/queues.h"
#include "controller/scheduler.h"

namespace moe::controller {

// A running job that may be preempted, as the pass saw it.
struct VictimCandidate {
  std::string id;
  std::string queue;
  std::string device;  // device type: cpu | cuda
  int64_t priority = 0;
  double created_at = 0;
  std::vector<Slot> slots;  // its ranks' workers, those that could take new work once it stops
  int64_t ranks = 0;        // every rank it holds (its quota use), placeable or not
  // The work a preemption would cost it: steps trained since its newest checkpoint. A victim stops
  // at its next step boundary and checkpoints there, so this is what a failure would have cost; it
  // orders victims of equal standing (the fewer first).
  int64_t steps_since_checkpoint = 0;
  bool lent = false;  // it borrows quota of the preemptor's cohort, which the preemptor reclaims
};

// What the preemptor needs and what is free now.
struct PreemptionProblem {
  PlacementRequest request;  // the preemptor's placement (its world size, EP, domain, device type)
  std::string queue;         // the preemptor's queue
  std::vector<Slot> free;    // free placeable slots now (victims' slots come on top)
  QueueUsage usage;          // ranks in use per queue and device type now
};

// The order victims are considered in: borrowers being reclaimed first; then lower priority; then
// less work lost (steps since the checkpoint times ranks); then fewer ranks; then the younger job.
bool PreemptBefore(const VictimCandidate& a, const VictimCandidate& b);

// The victims (ids, in the order chosen) whose stopping lets the preemptor fit its queue's quota
// and the workers, or none when even all of them would not. Candidates are taken in PreemptBefore's
// order until it fits (a lent candidate only while its queue still borrows); then fill-back: each
// chosen victim, last chosen first, is dropped again if the preemptor still fits without it, so no
// job is stopped whose capacity turned out not to be needed.
std::vector<std::string> ChooseVictims(const PreemptionProblem& problem,
                                       std::vector<VictimCandidate> candidates,
                                       const QueueBook& queues);

}  // namespace moe::controller
