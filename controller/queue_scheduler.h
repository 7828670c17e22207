// The scheduling pass: which queued jobs start now, and which running ones are preempted for them.
//
// Order (controller/queues.h): jobs that fit their queue's nominal quota before jobs that would
// borrow; then higher priority; then the queue with the smaller share of its quota (fair sharing);
// then earlier submission. A job that cannot be placed lets smaller ones further down go
// (backfill), except those it holds: jobs of lower priority while the jobs it preempted stop, and
// borrowers of a cohort in which a queue reclaims its nominal quota. Victims are chosen on a
// snapshot by ChooseVictims (preemption.h).
//
// Decide, then act (Kueue's cycle): the pass decides on the jobs and workers as they were when it
// began, changing nothing live while it decides, and writes its decisions into a plan (each queued
// job's wait and its reason, the placements, the victims to stop, elastic resizes, the jobs whose
// dependencies can no longer hold, the events); Act carries the plan out at the end, in one place.
//
// Not thread-safe: the Controller runs it under its mutex.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "controller/attempt_lifecycle.h"
#include "controller/clock.h"
#include "controller/config.h"
#include "controller/job_manager.h"
#include "controller/metrics_aggregator.h"
#include "controller/preemption.h"
#include "controller/queues.h"
#include "controller/worker_registry.h"
#include "moe/v1/job_service.pb.h"

namespace moe::controller {

struct SchedulePass;  // queue_scheduler.cc
// A job's shape as placement sees it: world size, EP, domain, device type, memory per rank, spares
// per rack.
using PlacementShape = std::tuple<int, int, std::string, std::string, int64_t, int>;
// Jobs that wait alike in one pass: their queue, priority and shape (SchedulePass::same_wait).
using WaitKey = std::tuple<std::string, int64_t, PlacementShape>;

class QueueScheduler {
 public:
  QueueScheduler(JobManager& jobs, WorkerRegistry& workers, AttemptLifecycle& attempts,
                 MetricsAggregator& metrics, Clock& clock, const ControllerConfig& config)
      : jobs_(jobs),
        workers_(workers),
        attempts_(attempts),
        metrics_(metrics),
        clock_(clock),
        config_(config),
        queues_(config.queues) {}

  // A pass, when something changed since the last one (AttemptLifecycle::NeedSchedule).
  // Whether a pass could place anything: a job queued, or an elastic one running smaller (cheap;
  // a registration runs a pass only then, so that a herd of them does not run thousands).
  bool MayPlace();
  void Run();
  // The queues with their quotas and usage (moectl get queues); one, "default", without --queues.
  std::vector<moe::v1::QueueStatus> Queues();
  const QueueBook& book() const { return queues_; }
  std::string QueueOf(const JobEntry& e) const;
  std::string DefaultQueue() const;  // a job's that names none

 private:
  bool DependenciesMet(JobEntry& e, SchedulePass& pass);  // metadata.depends_on (dependencies.h)
  static bool Shrunk(const JobEntry& e);
  QueueUsage UsageNow();
  bool ReplacesAWorker(const JobEntry& e) const;
  PlacementRequest Request(JobEntry& e) const;
  JobEntry* NextQueued(const std::map<std::string, std::vector<QueuedJob>>& by_queue,
                       std::map<std::string, size_t>& cursor, const QueueUsage& usage);
  const Status& Feasible(const PlacementRequest& req, SchedulePass& pass);
  std::optional<WaitKey> SameWaitKey(const JobEntry& e, const PlacementRequest& req,
                                     const SchedulePass& pass) const;
  // A restarting job's last workers, held for it (SchedulePass::reserved); those `e` may not take
  // leave pass.free (returned, for the caller to put back); TakeReserved: a job of higher priority
  // took some (the holder's event).
  void Reserve(const std::vector<JobEntry*>& queued, SchedulePass& pass);
  bool ReleaseVictimHolds(const JobEntry& e, SchedulePass& pass);
  std::vector<Slot> Withhold(const JobEntry& e, SchedulePass& pass);
  void TakeReserved(JobEntry& e, const std::vector<Slot>& placed, SchedulePass& pass);
  void ScheduleOne(JobEntry& e, SchedulePass& pass);
  void ScheduleWithin(JobEntry& e, SchedulePass& pass);
  void StartPlaced(JobEntry& e, const std::vector<Slot>& placed, SchedulePass& pass);
  void StartAll(SchedulePass& pass);
  bool StartSmaller(JobEntry& e, const PlacementRequest& full, SchedulePass& pass);
  void GrowElastic(SchedulePass& pass);
  bool PreemptionInFlight(JobEntry& e, SchedulePass& pass);
  void Act(SchedulePass& pass);
  // The snapshot ChooseVictims decides on: the running jobs `e` may preempt (of its queue and lower
  // priority; and, when it reclaims its nominal quota, the borrowers of its cohort whatever their
  // priority). A class marked never-preempted is never a candidate.
  std::vector<VictimCandidate> Candidates(const JobEntry& e, bool reclaim, SchedulePass& pass);
  // Chooses victims on the snapshot and stops them (PREEMPTED: they checkpoint at their next step
  // boundary, wait in the queue and resume without using a restart). False when none would do.
  bool Preempt(JobEntry& e, const PlacementRequest& req, bool reclaim, SchedulePass& pass);

  JobManager& jobs_;
  WorkerRegistry& workers_;
  AttemptLifecycle& attempts_;
  MetricsAggregator& metrics_;
  Clock& clock_;
  const ControllerConfig& config_;
  const QueueBook queues_;
};

}  // namespace moe::controller
