#include "controller/preemption.h"

#include <algorithm>
#include <tuple>

namespace moe::controller {
namespace {

// Whether the preemptor fits once `chosen` (indices into `cands`) have stopped.
bool FitsWithout(const PreemptionProblem& p, const std::vector<VictimCandidate>& cands,
                 const std::vector<size_t>& chosen, const QueueBook& queues) {
  std::vector<Slot> trial = p.free;
  QueueUsage usage = p.usage;
  for (size_t i : chosen) {
    const VictimCandidate& v = cands[i];
    trial.insert(trial.end(), v.slots.begin(), v.slots.end());
    usage[v.queue][v.device] -= v.ranks;
  }
  std::string unused;
  const int64_t ranks = p.request.world_size;
  if (queues.Admit(p.queue, p.request.device_type, ranks, usage, &unused) != Admission::kFits)
    return false;
  return Place(p.request, trial).ok();
}

// Ranks a lent candidate's queue would still borrow with `chosen` stopped (> 0: it still borrows).
int64_t StillBorrowed(const VictimCandidate& v, const std::vector<VictimCandidate>& cands,
                      const std::vector<size_t>& chosen, const QueueUsage& usage,
                      const QueueBook& queues) {
  QueueUsage now = usage;
  for (size_t i : chosen) now[cands[i].queue][cands[i].device] -= cands[i].ranks;
  return queues.Borrowed(v.queue, v.device, now);
}

}  // namespace

bool PreemptBefore(const VictimCandidate& a, const VictimCandidate& b) {
  const auto key = [](const VictimCandidate& v) {
    return std::make_tuple(!v.lent, v.priority,
                           v.steps_since_checkpoint * std::max<int64_t>(1, v.ranks), v.ranks,
                           -v.created_at, v.id);
  };
  return key(a) < key(b);
}

std::vector<std::string> ChooseVictims(const PreemptionProblem& problem,
                                       std::vector<VictimCandidate> candidates,
                                       const QueueBook& queues) {
  std::sort(candidates.begin(), candidates.end(), PreemptBefore);
  std::vector<size_t> chosen;
  bool fits = false;
  for (size_t i = 0; i < candidates.size() && !fits; ++i) {
    // A lent victim only while its queue still borrows (earlier victims may have ended that).
    if (candidates[i].queue != problem.queue &&
        StillBorrowed(candidates[i], candidates, chosen, problem.usage, queues) <= 0) {
      continue;
    }
    chosen.push_back(i);
    fits = FitsWithout(problem, candidates, chosen, queues);
  }
  if (!fits) return {};
  // Fill-back: the last chosen made it fit; any earlier one it does not need goes back to running.
  for (size_t k = chosen.size(); k-- > 1;) {
    std::vector<size_t> without = chosen;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(k - 1));
    if (FitsWithout(problem, candidates, without, queues)) chosen = std::move(without);
  }
  std::vector<std::string> ids;
  for (size_t i : chosen) ids.push_back(candidates[i].id);
  return ids;
}

}  // namespace moe::controller
