// The controller's logic, without transport: jobs, workers, scheduling, failures, rendezvous,
// metrics. The gRPC layer (grpc_server.cc) and the tests call it directly.
//
// Threads: gRPC's callback threads call the JobService and WorkerService entry points, main's loop
// calls Tick; one mutex serialises them all, and nothing in here blocks on the network
// (WorkerChannel and WatchFn only queue). The RendezvousStore has its own lock: its RPCs do not
// wait for this one.
//
// Events: the JobManager stores every change first, then tells its listeners (the
// MetricsAggregator, the JobWatchers). A change the store refuses fails the RPC that asked for it
// and changes nothing; one that no RPC waits for (a lost worker, a rank's end) is retried from Tick
// until it is stored.
//
// controller.cc holds the entry points, attempt_lifecycle.cc what happens to an attempt between its
// placement and its end.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "controller/mutex.h"
#include "common/status.h"
#include "controller/clock.h"
#include "controller/config.h"
#include "controller/job_manager.h"
#include "controller/job_watchers.h"
#include "controller/metrics_aggregator.h"
#include "controller/rendezvous.h"
#include "controller/state_store.h"
#include "controller/worker_registry.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

struct SchedulePass;  // schedule_pass.cc

class Controller {
 public:
  // Uses the lease, heartbeat, reconnect-grace and checkpoint-root settings of `config`.
  Controller(StateStore& store, Clock& clock, MetricsAggregator& metrics,
             const ControllerConfig& config);

  // Loads stored jobs; running ones wait for their workers to report back.
  Status Recover() ABSL_LOCKS_EXCLUDED(mu_);

  // JobService.
  // A non-empty `request_id` makes the submit idempotent: the job an earlier submit with the same
  // id created is returned instead of a new one.
  // `actor` (every state-changing call): the name of the caller's token, recorded in the job's events
  // and the log; empty without authentication.
  StatusOr<moe::v1::Job> Submit(const moe::v1::TrainingJob& job, const std::string& request_id = "",
                                const std::string& actor = "") ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Job> Get(const std::string& id, bool with_events) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Job> List(const std::vector<moe::v1::JobState>& states)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One page of jobs, oldest first, filtered by state and id prefix (job_admin.cc).
  StatusOr<moe::v1::ListJobsResponse> ListPage(const moe::v1::ListJobsRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a job. Its ranks checkpoint at their next step boundary and stop, unless `now` (killed at once).
  // A rank's output from the worker that runs or ran it: `done` is called once, with the slice, or
  // with why there is none (no such job or rank, the worker gone, no answer within 10 s).
  using LogsDone = std::function<void(StatusOr<moe::v1::GetLogsResponse>)>;
  void RequestLogs(const moe::v1::GetLogsRequest& req, LogsDone done) ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Job> Cancel(const std::string& id, const std::string& actor = "", bool now = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a finished job and its events; FAILED_PRECONDITION while it is live.
  Status Delete(const std::string& id, const std::string& actor = "") ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<int64_t> Watch(const std::string& id, WatchFn fn) ABSL_LOCKS_EXCLUDED(mu_);
  void Unwatch(int64_t subscription) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Worker> Workers() ABSL_LOCKS_EXCLUDED(mu_);
  // The queues with their quotas and usage (moectl get queues); one, "default", without --queues.
  std::vector<moe::v1::QueueStatus> Queues() ABSL_LOCKS_EXCLUDED(mu_);
  // Drains (no new work) or undrains a worker. `move_work` (drain only): its rank also checkpoints and
  // stops, and its job continues elsewhere without using a restart (as when the worker leaves).
  StatusOr<moe::v1::Worker> SetDrained(const std::string& name, bool drained, const std::string& actor = "",
                                       bool move_work = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a worker that is not connected (lost); FAILED_PRECONDITION for a connected one (stop its
  // moe-worker: SIGTERM leaves cleanly and removes it).
  Status DeleteWorker(const std::string& name, const std::string& actor = "") ABSL_LOCKS_EXCLUDED(mu_);

  // WorkerService: a worker's stream. Register first; then its messages; then Disconnected. The
  // stream is the worker's identity: a message about a rank of a running attempt that another
  // worker holds is refused with PERMISSION_DENIED (the stream then ends) and changes nothing.
  StatusOr<moe::v1::Registered> Register(const moe::v1::Register& reg, WorkerChannel* channel)
      ABSL_LOCKS_EXCLUDED(mu_);
  Status OnWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The rendezvous keys the worker holding `session` may use: its running attempt's prefix.
  // UNAUTHENTICATED without a live session, PERMISSION_DENIED when it runs no rank.
  StatusOr<std::string> RendezvousScope(const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);
  void Disconnected(const std::string& worker, WorkerChannel* channel) ABSL_LOCKS_EXCLUDED(mu_);
  RendezvousStore& rendezvous() { return rendezvous_; }

  // Leases, reconnect deadlines, retries of unstored changes, rendezvous timeouts, a scheduling
  // pass and the cluster's metrics. Call about every 100 ms.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // A clean stop (SIGTERM, a rolling update) begins: from now on a closing worker stream is the
  // controller going away, not the worker, and changes nothing stored. Its workers keep their ranks
  // running and reconnect to the next controller, which carries the jobs on (as after kill -9).
  void BeginShutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs waiting for placement (pending or restarting).
  size_t QueueLength() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Entry points' phases (controller.cc).
  Status AwaitReconnect(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status RestoreWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when a live job other than `id` checkpoints to `dir`.
  // Refuses a job whose per-rank memory (common/memory_model.h, moe-train --describe's accounting)
  // exceeds the memory every live worker of its device type reports.
  Status CheckMemoryFits(const JobSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleLogReply(const std::string& worker, const moe::v1::LogReply& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the log requests sent to `worker` ("" : every one) that it can no longer answer, or whose
  // deadline passed (now > 0).
  void FailLogRequests(const std::string& worker, double now, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CheckCheckpointDirFree(const std::string& dir) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's absolute data and checkpoint paths against the roots its workers reported.
  Status CheckPathsAllowed(const JobSpec& spec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finished jobs older than the retention go, with their events (job_admin.cc).
  void ExpireFinishedJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ranks assigned longer ago than the start deadline that never started fail their attempt.
  void CheckRankStarts(JobEntry& e, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PERMISSION_DENIED when rank `rank` of the running attempt `attempt` of `job_id` is another
  // worker's; OK otherwise (a stale or unknown attempt is ignored by the handlers).
  Status CheckRankOwner(const std::string& worker, const std::string& job_id, int attempt, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CheckWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BindRunningRanks(const moe::v1::Register& reg, WorkerChannel& channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetUnreportedRank(const moe::v1::Register& reg, const WorkerEntry& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleStep(const moe::v1::StepReport& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordStraggler(JobEntry& e, const StragglerChange& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLeases() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckReconnect(JobEntry& e, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishClusterMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The attempt lifecycle (attempt_lifecycle.cc): placement, start, failure, stop, end.
  void Schedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status StartAttempt(JobEntry& e, const std::vector<Slot>& slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendAssignments(const JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The running attempt failed because of `reason`: stops its ranks, records the failure (the job
  // restarts or fails) and ends the attempt once no rank runs.
  // counted = false: not a failure of the job's making (a worker leaves cleanly): the job goes back to
  // the queue without using one of max_restarts; preempted (with counted = false): as PREEMPTED.
  void FailAttempt(JobEntry& e, const std::string& reason, bool permanent = false, bool counted = true,
                   bool preempted = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker says it is leaving (Leaving): no new work; its job is requeued.
  void WorkerLeaving(const std::string& name, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a worker: the registry's entry and the stored one (the name is free again).
  Status ForgetWorker(const std::string& name, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneLostWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells every live rank of the attempt to stop: at its next step boundary, checkpointing there, or
  // killed at once (`now`).
  // The scheduling pass (schedule_pass.cc).
  std::string QueueOf(const JobEntry& e) const;
  QueueUsage UsageNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobEntry* NextQueued(const std::map<std::string, std::vector<QueuedJob>>& by_queue,
                       std::map<std::string, size_t>& cursor, const QueueUsage& usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Status& Feasible(const PlacementRequest& req, SchedulePass& pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleOne(JobEntry& e, SchedulePass& pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPlaced(JobEntry& e, const std::vector<Slot>& placed, SchedulePass& pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StartSmaller(JobEntry& e, const PlacementRequest& full, SchedulePass& pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrowElastic(SchedulePass& pass) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PreemptionInFlight(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<JobEntry*> PreemptionCandidates(const JobEntry& e, bool reclaim, SchedulePass& pass)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Preempt(JobEntry& e, const PlacementRequest& req, bool reclaim, SchedulePass& pass)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status ApplyPriorityClass(JobSpec* spec) const;
  bool Preemptible(const JobSpec& spec) const;  // false for a class marked never-preempted
  double RestartDelay(int n) const;                 // the wait before a job's n-th restart
  std::string ResumePoint(const JobEntry& e) const;  // "from the checkpoint of step 100", ...
  void StopRanks(JobEntry& e, const std::string& reason, bool now = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleFinished(const std::string& worker, const moe::v1::RankFinished& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RankFinished(JobEntry& e, int rank, const moe::v1::RankFinished& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLost(const std::string& name, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank `worker` was assigned is gone (the worker was lost, or came back without it).
  void RankLost(const std::string& worker, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records what became of the attempt (its failure, or its success once every rank is done) and
  // ends it when no rank runs. Idempotent: what the store refused is recorded by a later call.
  Status SettleAttempt(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status RecordFailure(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettleAttempt where no RPC waits for the outcome: a refusal is logged, and Tick settles again.
  void SettleOrRetry(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobEntry* AttemptOf(const std::string& job_id, int attempt, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;  // BeginShutdown
  StateStore& store_;  // worker sessions; jobs go through jobs_
  Clock& clock_;
  MetricsAggregator& metrics_;  // used under mu_ (it is not thread-safe)
  const ControllerConfig config_;
  const QueueBook queues_;
  JobManager jobs_ ABSL_GUARDED_BY(mu_);
  JobWatchers watchers_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  RendezvousStore rendezvous_;  // has its own lock
  bool schedule_needed_ ABSL_GUARDED_BY(mu_) = true;
  // moectl logs: requests sent to workers, answered by their LogReply (job_logs.cc).
  struct PendingLogs {
    std::string worker;
    double deadline = 0;  // monotonic
    LogsDone done;
    moe::v1::GetLogsResponse response;  // attempt and worker filled in
  };
  std::map<uint64_t, PendingLogs> pending_logs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_log_request_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace moe::controller
