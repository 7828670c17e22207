// The scheduling pass (queue_scheduler.h says the order and what holds a job back).
#include "controller/queue_scheduler.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

#include "common/job_spec.h"
#include "common/log.h"
#include "controller/admission.h"
#include "controller/controller_internal.h"
#include "controller/dependencies.h"

namespace moe::controller {

using moe::v1::JobState;

struct SchedulePass {
  double now = 0;
  std::vector<Slot> free;
  std::vector<Slot> live;  // every live worker's slots (filled on first use)
  bool live_known = false;
  QueueUsage usage;
  std::map<PlacementShape, Status> feasible;  // by job shape: fits on every live worker?
  bool withheld = false;  // the job now considered had workers withheld (ScheduleOne)
  int64_t hold_below = std::numeric_limits<int64_t>::min();
  std::string holder;
  std::set<std::string> reclaiming;  // cohorts in which a queue waits for its lent quota
  std::vector<JobEntry*> running;    // jobs with ranks (preemption candidates), filled on first use
  bool running_known = false;
  // The jobs placed so far, started together at the end of the pass (one write for all of them);
  // `free` and `usage` count them already.
  std::vector<AttemptLifecycle::Placement> starts;
  // Workers of a restarting job's last placement, held for its restart (through its back-off, until
  // it is placed or ends), and those of the jobs a queued job preempted, held for it (until it is
  // placed or its preemption is over): a queued job of equal or lower priority does not take them.
  std::map<std::string, JobEntry*> reserved;
  std::set<std::string> victim_holds;  // the workers in `reserved` held as a preemptor's victims'
  bool withheld_any = false;           // some job had held workers withheld from it

  // The plan. The pass decides on values (the jobs and workers as they were when it began: nothing
  // live changes while it decides) and Act carries the plan out at its end, in one place: waits
  // and chosen victims noted, the placements stored (one write), victims and grow-backs stopped,
  // jobs whose dependencies cannot hold cancelled, events recorded.
  struct PlannedWait {
    WaitClass wait_class = WaitClass::kNone;
    std::string why;
  };
  struct PlannedStop {
    JobEntry* e;
    std::string reason;
    StopCause cause;
  };
  struct PlannedEvent {
    JobEntry* e;
    std::string type, message;
  };
  std::map<JobEntry*, PlannedWait> waits;
  // The wait a pass decided for a job placed afresh (no previous placement, no preemption of its
  // own, not elastic, no worker withheld from it), by its queue, priority and shape, since `free`
  // last changed (a placement, a preemption): a later job of the same waits for the same reason
  // without its placement tried again (a burst of 2,000 queued jobs made a pass 7-10 ms, under the
  // lock that every GetJob and ListJobs waits for).
  std::map<WaitKey, PlannedWait> same_wait;
  std::map<JobEntry*, std::vector<std::string>> preempting;  // victims chosen (empty: cleared)
  std::vector<PlannedStop> stops;
  std::set<const JobEntry*> stopping;  // stops planned: no job's victim again in this pass
  std::vector<std::pair<JobEntry*, std::string>> cancels;  // dependencies that cannot hold
  std::vector<PlannedEvent> events;
};

namespace {

// Why `e` waits, as this pass decided (Act writes it into the job's entry).
void Wait(SchedulePass& pass, JobEntry& e, WaitClass c, std::string why) {
  pass.waits[&e] = {c, std::move(why)};
}

// The victims `e` waits for: chosen in this pass, else those of an earlier one.
const std::vector<std::string>& Victims(const SchedulePass& pass, JobEntry& e) {
  const auto it = pass.preempting.find(&e);
  return it != pass.preempting.end() ? it->second : e.preempting;
}

std::string Join(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

}  // namespace

std::string QueueScheduler::QueueOf(const JobEntry& e) const {
  return e.spec.queue.empty() ? DefaultQueue() : e.spec.queue;
}

std::string QueueScheduler::DefaultQueue() const {
  return queues_.enabled() ? queues_.config().default_queue : kDefaultQueue;
}

QueueUsage QueueScheduler::UsageNow() {
  QueueUsage usage;
  for (JobEntry* e : jobs_.WithAttempt())
    usage[QueueOf(*e)][e->spec.resources.device] += int64_t(e->attempt->slots.size());
  return usage;
}

void QueueScheduler::Run() {
  if (!attempts_.TakeScheduleNeeded()) return;
  SchedulePass pass;
  pass.now = clock_.Monotonic();
  std::map<std::string, std::vector<QueuedJob>> by_queue;
  const std::vector<JobEntry*> queued = jobs_.Queued();
  for (JobEntry* e : queued) {
    if (e->not_before > pass.now) {  // restart backoff (Tick schedules again when it ends)
      Wait(pass, *e, WaitClass::kBackoff,
           "restart backoff: placed again in " + internal::Seconds(e->not_before - pass.now));
      continue;
    }
    if (e->job.state() == moe::v1::PENDING && !e->spec.depends_on.empty() &&
        !DependenciesMet(*e, pass))
      continue;
    // A restarting job waits until its previous attempt's ranks have stopped.
    if (!e->attempt) {
      by_queue[QueueOf(*e)].push_back({e->job.id(), e->spec.priority, e->job.created_at(), e});
    }
  }
  // Nothing to place and nothing to grow back: no walk over every device (a cold start of 131,072
  // devices asks for a pass at every registration).
  const std::vector<JobEntry*> running = jobs_.WithAttempt();
  if (by_queue.empty() &&
      std::none_of(running.begin(), running.end(), [](JobEntry* e) { return Shrunk(*e); })) {
    Act(pass);  // the waits and cancels the first walk decided
    metrics_.ObserveSchedulerDecision(clock_.Monotonic() - pass.now);
    return;
  }
  for (auto& [q, jobs] : by_queue) jobs = QueueOrder(std::move(jobs));
  pass.free = workers_.FreeSlots();
  Reserve(queued, pass);
  pass.usage = UsageNow();
  std::map<std::string, size_t> cursor;
  while (JobEntry* e = NextQueued(by_queue, cursor, pass.usage)) ScheduleOne(*e, pass);
  GrowElastic(pass);
  Act(pass);
  metrics_.ObserveSchedulerDecision(clock_.Monotonic() - pass.now);
}

// Carries out what the pass decided, in one place and this order: each job's wait and chosen
// victims, the placements (one write: a refused one leaves them all queued, "not started"), the
// stops (victims, grow-backs), the cancels of jobs whose dependencies cannot hold, the events.
void QueueScheduler::Act(SchedulePass& pass) {
  for (auto& [e, w] : pass.waits) {
    e->wait_class = w.wait_class;
    e->waiting_reason = std::move(w.why);
  }
  for (auto& [e, victims] : pass.preempting) e->preempting = std::move(victims);
  StartAll(pass);
  for (const auto& stop : pass.stops) attempts_.Stop(*stop.e, stop.reason, stop.cause);
  for (const auto& [e, why] : pass.cancels) {
    if (Status st =
            jobs_.Transition(*e, moe::v1::CANCELLED, "DependencyFailed", "cancelled: " + why);
        !st.ok()) {
      MOE_LOG(WARNING) << "job " << e->job.id() << ": " << why
                       << "; its cancel is not stored yet: " << st << " (retried at the next pass)";
      attempts_.NeedSchedule();
    }
  }
  for (const auto& ev : pass.events) {
    if (Status st = jobs_.Event(*ev.e, ev.type, ev.message); !st.ok()) {
      MOE_LOG(WARNING) << "job " << ev.e->job.id() << ": the " << ev.type
                       << " event is not stored: " << st;
    }
  }
}

// metadata.depends_on: false while the job waits for them (its waiting reason says for which), and
// for a job cancelled because one can no longer reach its condition.
bool QueueScheduler::DependenciesMet(JobEntry& e, SchedulePass& pass) {
  const DependencyCheck c = CheckDependencies(e, jobs_);
  if (c.kind == DependencyCheck::kReady) return true;
  Wait(pass, e, WaitClass::kDependency, c.why);  // a cancel refused by the store leaves it waiting
  if (c.kind != DependencyCheck::kWait) pass.cancels.push_back({&e, c.why});
  return false;
}

// The next job to consider: the best head among the queues (the order above).
JobEntry* QueueScheduler::NextQueued(const std::map<std::string, std::vector<QueuedJob>>& by_queue,
                                     std::map<std::string, size_t>& cursor,
                                     const QueueUsage& usage) {
  using Key = std::tuple<bool, bool, int64_t, double, double, std::string_view>;
  std::optional<Key> best;
  const std::string* best_queue = nullptr;
  JobEntry* best_entry = nullptr;
  for (const auto& [q, jobs] : by_queue) {
    const size_t at = cursor[q];
    if (at >= jobs.size()) continue;
    const QueuedJob& j = jobs[at];
    JobEntry* e = j.entry;
    const std::string& device = e->spec.resources.device;
    const bool borrows =
        queues_.enabled() &&
        Used(usage, q, device) + e->spec.parallelism.world_size > queues_.Nominal(q, device);
    // A job whose preemption runs goes first: what its victims free is its own.
    Key key{e->preempting.empty(), borrows,
            -j.priority,           queues_.enabled() ? queues_.Share(q, usage) : 0.0,
            j.submitted_at,        j.id};
    if (!best || key < *best) best = key, best_queue = &q, best_entry = e;
  }
  if (!best) return nullptr;
  ++cursor[*best_queue];
  return best_entry;
}

// A restart that replaces a worker its last attempt lost (lost, left, drained with its work moved):
// it may take the spares held back in each rack (--spares-per-rack). A requeue whose workers are
// all still there (an elastic job growing back, a preempted one) is a new placement like any other.
bool QueueScheduler::ReplacesAWorker(const JobEntry& e) const {
  if (e.job.state() != moe::v1::RESTARTING) return false;
  for (const auto& p : e.job.placement()) {
    if (!workers_.Placeable(p.worker())) return true;
  }
  return false;
}

// What placing the job asks for: its layout, the memory one of its ranks needs on a worker, and the
// spares it must leave alone.
PlacementRequest QueueScheduler::Request(JobEntry& e) const {
  PlacementRequest req = internal::RequestFor(e.spec);
  req.min_memory = RankMemoryNeed(e);
  req.unknown_memory_ok = config_.allow_unknown_memory;
  req.spares_per_rack = ReplacesAWorker(e) ? 0 : config_.spares_per_rack;
  return req;
}

namespace {

PlacementShape ShapeOf(const PlacementRequest& req) {
  return {req.world_size,  req.expert_parallel, req.within,
          req.device_type, req.min_memory,      req.spares_per_rack};
}

}  // namespace

// The key under which `e`'s wait may be shared (SchedulePass::same_wait), when it may.
std::optional<WaitKey> QueueScheduler::SameWaitKey(const JobEntry& e, const PlacementRequest& req,
                                                   const SchedulePass& pass) const {
  if (pass.withheld || !req.previous.empty() || !e.preempting.empty() ||
      e.spec.elastic.min_data_parallel > 0)
    return std::nullopt;
  return WaitKey{QueueOf(e), e.spec.priority, ShapeOf(req)};
}

const Status& QueueScheduler::Feasible(const PlacementRequest& req, SchedulePass& pass) {
  const PlacementShape shape = ShapeOf(req);
  auto it = pass.feasible.find(shape);
  if (it != pass.feasible.end()) return it->second;
  if (!pass.live_known) pass.live = workers_.LiveSlots(), pass.live_known = true;
  return pass.feasible.emplace(shape, CheckFeasible(req, pass.live)).first->second;
}

// The workers each restarting job's last attempt ran on that are still placeable: its surviving
// ranks' (and a failed rank's, when its worker is still there), held for its restart. And the
// workers of the jobs a queued job preempted, held for it: a victim that stops first frees its
// worker for its own preemptor, not for another one (of equal priority) whose victim still runs,
// which would leave the first without a worker and preempt again.
void QueueScheduler::Reserve(const std::vector<JobEntry*>& queued, SchedulePass& pass) {
  // A worker two jobs would hold (a victim that is itself restarting, say) goes to the higher
  // priority, and between equals to the preemptor: else a job between the two could take it.
  const auto hold = [&](const moe::v1::Job& job, JobEntry* holder, bool victim) {
    for (const auto& p : job.placement()) {
      if (!workers_.Placeable(p.worker())) continue;
      auto [it, fresh] = pass.reserved.emplace(p.worker(), holder);
      const int64_t was = it->second->spec.priority, is = holder->spec.priority;
      if (!fresh && (is > was || (victim && is == was))) it->second = holder;
      if (it->second != holder) continue;
      victim ? (void)pass.victim_holds.insert(p.worker())
             : (void)pass.victim_holds.erase(p.worker());
    }
  };
  for (JobEntry* e : queued) {  // a cancelled preemptor holds nothing
    // Its attempt may still be ending (a rank yet to stop): the workers already free are held too.
    if (e->job.state() == moe::v1::RESTARTING) hold(e->job, e, false);
    for (const std::string& id : e->preempting) {
      if (const JobEntry* v = jobs_.Find(id)) hold(v->job, e, true);
    }
  }
}

// What was held for `e` as its victims' is held no longer; true when something was.
bool QueueScheduler::ReleaseVictimHolds(const JobEntry& e, SchedulePass& pass) {
  const size_t before = pass.reserved.size();
  std::erase_if(pass.reserved, [&](const auto& held) {
    return held.second == &e && pass.victim_holds.count(held.first) > 0;
  });
  return pass.reserved.size() != before;
}

// Moves out of pass.free the slots held for another job's restart that `e` may not take (the
// restarting job's priority is equal or higher); the caller puts them back.
std::vector<Slot> QueueScheduler::Withhold(const JobEntry& e, SchedulePass& pass) {
  std::vector<Slot> held;
  if (pass.reserved.empty()) return held;
  std::erase_if(pass.free, [&](const Slot& s) {
    const auto it = pass.reserved.find(s.worker);
    if (it == pass.reserved.end() || it->second == &e ||
        it->second->spec.priority < e.spec.priority)
      return false;
    held.push_back(s);
    return true;
  });
  return held;
}

namespace {

// Whom a reserved worker is held for, in a waiting reason or an event.
std::string For(const JobEntry& holder) {
  const std::string priority = " (priority " + std::to_string(holder.spec.priority) + ")";
  if (holder.job.state() == moe::v1::RESTARTING)
    return "the restart of " + holder.job.id() + priority;
  return "job " + holder.job.id() + priority + ", which preempted the job that ran there";
}

}  // namespace

void QueueScheduler::ScheduleOne(JobEntry& e, SchedulePass& pass) {
  std::vector<Slot> held = Withhold(e, pass);
  pass.withheld = !held.empty();
  pass.withheld_any |= pass.withheld;
  ScheduleWithin(e, pass);
  auto wait = pass.waits.find(&e);
  const bool unfit = wait != pass.waits.end() && (wait->second.wait_class == WaitClass::kCapacity ||
                                                  wait->second.wait_class == WaitClass::kQuota);
  if (unfit && !e.preempting.empty()) pass.preempting[&e].clear();  // it could not use them now
  // Its preemption over (placed; its victims stopped and it preempts no more; it no longer fits
  // the cluster or its quota): the workers held as its victims' are free for the jobs after it,
  // and a job already refused them gets them in the next pass.
  if (const auto it = pass.preempting.find(&e); it != pass.preempting.end() && it->second.empty()) {
    if (ReleaseVictimHolds(e, pass) && pass.withheld_any) attempts_.NeedSchedule();
  }
  if (!held.empty() && wait != pass.waits.end() && wait->second.wait_class == WaitClass::kBusy) {
    const auto holder = pass.reserved.find(held.front().worker);
    if (holder != pass.reserved.end())
      wait->second.why += "; " + std::to_string(held.size()) + " free worker(s) are held for " +
                          For(*holder->second);
  }
  pass.free.insert(pass.free.end(), held.begin(), held.end());
}

void QueueScheduler::ScheduleWithin(JobEntry& e, SchedulePass& pass) {
  if (e.spec.priority < pass.hold_below) {
    Wait(pass, e, WaitClass::kHeld,
         "held: " + pass.holder + " (priority " + std::to_string(pass.hold_below) +
             ") waits for the jobs it preempted to stop");
    return;
  }
  const std::string queue = QueueOf(e), &device = e.spec.resources.device;
  const int64_t ranks = e.spec.parallelism.world_size;
  std::string quota;
  const Admission admission = queues_.Admit(queue, device, ranks, pass.usage, &quota);
  const QueueSpec* spec = queues_.Find(queue);
  // Within its own nominal quota the job may take back what its cohort borrowed, whether the
  // cohort's quota is full (kReclaim) or the workers are (a worker lost or drained while others
  // borrow).
  const bool within_nominal = queues_.enabled() && Used(pass.usage, queue, device) + ranks <=
                                                       queues_.Nominal(queue, device);
  if (admission == Admission::kFits && !quota.empty() && spec &&
      pass.reclaiming.count(spec->cohort)) {
    Wait(pass, e, WaitClass::kHeld,
         "held: a queue of cohort " + spec->cohort + " reclaims the quota it lent (" + quota + ")");
    return;
  }
  PlacementRequest req = Request(e);
  req.previous = internal::SlotsOf(e.job);
  const std::optional<WaitKey> key = SameWaitKey(e, req, pass);
  if (key) {
    if (const auto same = pass.same_wait.find(*key); same != pass.same_wait.end()) {
      pass.waits[&e] = same->second;  // as the last job of its shape: nothing freed since
      return;
    }
  }
  StatusOr<std::vector<Slot>> placed =
      admission == Admission::kFits ? Place(req, pass.free)
                                    : StatusOr<std::vector<Slot>>(ResourceExhaustedError(quota));
  if (placed.ok()) {
    StartPlaced(e, *placed, pass);
    return;
  }
  // Not even on every live worker: it waits for workers to register, and says how many it needs.
  const Status& fits = Feasible(req, pass);
  if (admission != Admission::kFits) {
    // Said once: a priority that looks higher than a running job's does not reach across queues.
    Wait(pass, e, WaitClass::kQuota,
         quota +
             "; it preempts only lower-priority jobs of its own queue and what its cohort "
             "borrowed, never other queues' jobs");
  } else if (fits.ok()) {
    Wait(pass, e, WaitClass::kBusy, placed.status().message());
  } else {
    Wait(pass, e, WaitClass::kCapacity, "waiting for capacity: " + fits.message());
  }
  if (fits.ok()) {
    if (within_nominal && spec && !spec->cohort.empty()) pass.reclaiming.insert(spec->cohort);
    if (PreemptionInFlight(e, pass) || Preempt(e, req, within_nominal, pass)) {
      Wait(pass, e, WaitClass::kPreempting,
           "preempting " + Join(Victims(pass, e)) +
               ": placed once their ranks have checkpointed and stopped");
      if (e.spec.priority > pass.hold_below)
        pass.hold_below = e.spec.priority, pass.holder = e.job.id();
      pass.same_wait.clear();  // victims chosen: what the next job may preempt changed
      return;
    }
  }
  if (!StartSmaller(e, req, pass) && key) pass.same_wait[*key] = pass.waits[&e];
}

// spec.elastic: rather than wait, run at the largest smaller data-parallel size that fits now (the
// same PP and EP; the ranks resume from the layout-independent checkpoint, the global batch kept by
// more micro-batches per rank).
bool QueueScheduler::StartSmaller(JobEntry& e, const PlacementRequest& full, SchedulePass& pass) {
  if (e.spec.checkpoint.dir.empty()) return false;  // without checkpoints a resize would start over
  const std::string queue = QueueOf(e);
  const QueueSpec* spec = queues_.Find(queue);
  std::string quota;
  for (const int64_t world : ElasticWorldSizes(e.spec)) {
    if (queues_.Admit(queue, e.spec.resources.device, world, pass.usage, &quota) !=
        Admission::kFits)
      continue;
    if (!quota.empty() && spec && pass.reclaiming.count(spec->cohort))
      continue;  // would borrow what is reclaimed
    PlacementRequest req = full;
    req.world_size = static_cast<int>(world);
    auto placed = Place(req, pass.free);
    if (!placed.ok()) continue;
    const std::string why = "runs at world size " + std::to_string(world) + " (data-parallel " +
                            std::to_string(world / e.spec.parallelism.pipeline_parallel) + ") of " +
                            std::to_string(full.world_size) +
                            " (spec.elastic): " + pass.waits[&e].why +
                            "; it grows back when workers are free";
    pass.events.push_back({&e, "Resized", why});
    StartPlaced(e, *placed, pass);
    return true;
  }
  return false;
}

// After the pass: an elastic job running below its size grows back when the workers left free (no
// queued job wanted them) with its own would hold it whole. It stops at its next step boundary with
// a checkpoint and is placed again at once, without using a restart.
// An elastic job running smaller than it asked for: it grows back when room appears.
bool QueueScheduler::Shrunk(const JobEntry& e) {
  if (!e.attempt || e.attempt->ending || e.job.state() != moe::v1::RUNNING) return false;
  return e.spec.elastic.min_data_parallel > 0 &&
         e.attempt->slots.size() < size_t(e.spec.parallelism.world_size);
}

bool QueueScheduler::MayPlace() {
  if (jobs_.CountQueued() > 0) return true;
  for (JobEntry* e : jobs_.WithAttempt()) {
    if (Shrunk(*e)) return true;
  }
  return false;
}

void QueueScheduler::GrowElastic(SchedulePass& pass) {
  for (JobEntry* e : jobs_.WithAttempt()) {
    if (!Shrunk(*e)) continue;
    const size_t world = e->attempt->slots.size();
    if (e->spec.checkpoint.dir.empty() || e->spec.priority < pass.hold_below) continue;
    const std::vector<Slot> held = Withhold(*e, pass);  // another job's restart's
    std::vector<Slot> trial = pass.free;
    pass.free.insert(pass.free.end(), held.begin(), held.end());
    for (Slot s : e->attempt->slots) {
      s.memory = workers_.MemoryFor(s.worker);
      if (workers_.Placeable(s.worker)) trial.push_back(s);
    }
    QueueUsage usage = pass.usage;
    usage[QueueOf(*e)][e->spec.resources.device] -= int64_t(world);
    std::string quota;
    const QueueSpec* spec = queues_.Find(QueueOf(*e));
    if (queues_.Admit(QueueOf(*e), e->spec.resources.device, e->spec.parallelism.world_size, usage,
                      &quota) != Admission::kFits ||
        (!quota.empty() && spec && pass.reclaiming.count(spec->cohort))) {
      continue;
    }
    auto placed = Place(Request(*e), trial);
    if (!placed.ok()) continue;
    const std::string why =
        "grows back from world size " + std::to_string(world) + " to " +
        std::to_string(e->spec.parallelism.world_size) +
        ": its ranks checkpoint at the next step boundary and it is placed again";
    pass.events.push_back({e, "Resizing", why});
    pass.stops.push_back({e, why, StopCause::kRequeue});
    pass.stopping.insert(e);
    pass.usage[QueueOf(*e)][e->spec.resources.device] +=
        e->spec.parallelism.world_size - int64_t(world);
    std::set<std::string> used;
    for (const auto& s : *placed) used.insert(s.worker);
    std::erase_if(pass.free, [&](const Slot& s) { return used.count(s.worker) > 0; });
  }
}

void QueueScheduler::StartPlaced(JobEntry& e, const std::vector<Slot>& placed, SchedulePass& pass) {
  pass.same_wait.clear();  // fewer free workers, more usage: every shape's wait is decided afresh
  pass.preempting[&e].clear();
  Wait(pass, e, WaitClass::kNone, "");
  TakeReserved(e, placed, pass);  // the rest of what was held for it: ScheduleOne
  pass.starts.push_back({&e, placed});
  pass.usage[QueueOf(e)][e.spec.resources.device] += int64_t(placed.size());
  std::set<std::string> used;
  for (const auto& s : placed) used.insert(s.worker);
  std::erase_if(pass.free, [&](const Slot& s) { return used.count(s.worker) > 0; });
}

// A job of higher priority placed on workers held for another job's restart: that job hears it (an
// event), and they are no longer held for it.
void QueueScheduler::TakeReserved(JobEntry& e, const std::vector<Slot>& placed,
                                  SchedulePass& pass) {
  for (const Slot& s : placed) {
    const auto it = pass.reserved.find(s.worker);
    if (it == pass.reserved.end()) continue;
    JobEntry* holder = it->second;
    pass.reserved.erase(it);
    if (holder == &e) continue;
    const std::string why = "worker " + s.worker + ", held for " + For(*holder) +
                            ", taken by job " + e.job.id() + " (priority " +
                            std::to_string(e.spec.priority) + " > " +
                            std::to_string(holder->spec.priority) + ")";
    pass.events.push_back({holder, "ReservationTaken", why});
  }
}

// The pass's placements in one write (a burst of submits placed by one pass waits for one fsync,
// not one each, with the change lock held); a refused write leaves them all queued for the next.
void QueueScheduler::StartAll(SchedulePass& pass) {
  if (pass.starts.empty()) return;
  if (Status st = attempts_.StartAll(pass.starts); !st.ok()) {
    MOE_LOG(WARNING) << pass.starts.size() << " job(s) not started: " << st
                     << " (they stay queued; the next tick tries again)";
    for (const auto& p : pass.starts) {
      p.e->wait_class = WaitClass::kStuck;
      p.e->waiting_reason = "not started: " + st.message();
    }
    attempts_.NeedSchedule();
  }
  pass.starts.clear();
}

// Whether a job's earlier preemption still runs: some job it preempted has ranks that have not
// stopped.
bool QueueScheduler::PreemptionInFlight(JobEntry& e, SchedulePass& pass) {
  if (e.preempting.empty()) return false;
  bool running = false;
  for (const std::string& id : e.preempting) {
    const JobEntry* v = jobs_.Find(id);
    running |= v != nullptr && v->attempt != nullptr;
  }
  if (!running) pass.preempting[&e].clear();  // they stopped and it still does not fit: again
  return running;
}

std::vector<VictimCandidate> QueueScheduler::Candidates(const JobEntry& e, bool reclaim,
                                                        SchedulePass& pass) {
  const std::string queue = QueueOf(e);
  std::set<std::string> cohort;
  for (const QueueSpec* q : queues_.CohortOf(queue)) cohort.insert(q->name);
  if (!pass.running_known) {  // once per pass: a queue of thousands must not scan every job for
                              // each
    pass.running = jobs_.WithAttempt();
    pass.running_known = true;
  }
  std::vector<VictimCandidate> out;
  for (JobEntry* v : pass.running) {
    // Neither of lower priority nor lendable back: skipped before any string is built or compared
    // (a queue of 900 jobs of one priority against 150 running ones was 18 % of the controller's
    // core in bench/load.py's jobs phase, every pass).
    if (!reclaim && v->spec.priority >= e.spec.priority) continue;
    const JobState s = v->job.state();
    if (!v->attempt || v->attempt->ending || pass.stopping.count(v) ||
        !Preemptible(config_, v->spec))
      continue;
    if (s != moe::v1::SCHEDULED && s != moe::v1::RUNNING) continue;
    const std::string qv = QueueOf(*v), &device = v->spec.resources.device;
    const bool lower = qv == queue && v->spec.priority < e.spec.priority;
    const bool lent = reclaim && qv != queue && cohort.count(qv) &&
                      device == e.spec.resources.device &&
                      queues_.Borrowed(qv, device, pass.usage) > 0;
    if (!lower && !lent) continue;
    VictimCandidate c{v->job.id(), qv, device, v->spec.priority, v->job.created_at()};
    for (Slot slot : v->attempt->slots) {
      slot.memory = workers_.MemoryFor(slot.worker);
      if (workers_.Placeable(slot.worker)) c.slots.push_back(slot);
    }
    c.ranks = static_cast<int64_t>(v->attempt->slots.size());
    c.steps_since_checkpoint =
        std::max<int64_t>(0, v->job.last_metrics().step() - v->job.checkpoint_step());
    c.lent = lent;
    out.push_back(std::move(c));
  }
  return out;
}

bool QueueScheduler::Preempt(JobEntry& e, const PlacementRequest& req, bool reclaim,
                             SchedulePass& pass) {
  if (!config_.preemption) return false;
  PreemptionProblem problem{req, QueueOf(e), pass.free, pass.usage};
  const std::vector<std::string> victims =
      ChooseVictims(problem, Candidates(e, reclaim, pass), queues_);
  if (victims.empty()) return false;
  pass.preempting[&e] = victims;
  for (const std::string& id : victims) {
    JobEntry* v = jobs_.Find(id);
    const bool lent = QueueOf(*v) != QueueOf(e);
    pass.stops.push_back({v,
                          "preempted by job " + e.job.id() +
                              (lent ? " (queue " + QueueOf(e) + " reclaims the quota queue " +
                                          QueueOf(*v) + " borrowed)"
                                    : " (priority " + std::to_string(e.spec.priority) + " > " +
                                          std::to_string(v->spec.priority) + ")"),
                          StopCause::kPreempted});
    pass.stopping.insert(v);
  }
  pass.events.push_back({&e, "Preempting", "stopping " + Join(victims) + " to make room"});
  return true;
}

std::vector<moe::v1::QueueStatus> QueueScheduler::Queues() {
  const QueueUsage usage = UsageNow();
  std::vector<QueueSpec> specs = queues_.config().queues;
  if (!queues_.enabled()) specs.push_back(QueueSpec{kDefaultQueue, "", {}, {}, 1});
  std::map<std::string, moe::v1::QueueStatus> out;
  for (const QueueSpec& q : specs) {
    moe::v1::QueueStatus& st = out[q.name];
    st.set_name(q.name);
    st.set_cohort(q.cohort);
    st.set_weight(q.weight);
    st.set_share(queues_.enabled() ? queues_.Share(q.name, usage) : 0);
    std::set<std::string> devices;
    for (const auto& [d, _] : q.quota) devices.insert(d);
    if (auto it = usage.find(q.name); it != usage.end()) {
      for (const auto& [d, _] : it->second) devices.insert(d);
    }
    if (!queues_.enabled() && devices.empty())
      devices.insert("cpu");  // the unlimited default: a row all the same
    for (const std::string& d : devices) {
      moe::v1::QueueResource* r = st.add_resources();
      r->set_device(d);
      r->set_nominal(queues_.enabled() ? queues_.Nominal(q.name, d) : -1);
      const auto limit = q.borrowing_limit.find(d);
      r->set_borrowing_limit(limit == q.borrowing_limit.end() ? -1 : limit->second);
      r->set_used(Used(usage, q.name, d));
      r->set_borrowed(queues_.Borrowed(q.name, d, usage));
    }
  }
  for (JobEntry* e : jobs_.WithAttempt()) {
    const auto it = out.find(QueueOf(*e));
    if (it != out.end()) it->second.set_admitted_jobs(it->second.admitted_jobs() + 1);
  }
  for (const auto& [queue, n] : jobs_.WaitingByQueue()) {
    const auto it = out.find(queue.empty() ? DefaultQueue() : queue);
    if (it != out.end()) it->second.set_pending_jobs(it->second.pending_jobs() + n);
  }
  std::vector<moe::v1::QueueStatus> list;
  for (const QueueSpec& q : specs) list.push_back(out[q.name]);
  return list;
}

}  // namespace moe::controller
