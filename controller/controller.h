// The controller's logic, without transport: jobs, workers, scheduling, failures, rendezvous,
// metrics. The gRPC layer (grpc_server.cc) and the tests call it directly.
//
// Threads: gRPC's threads call the JobService and WorkerService entry points, main's loop calls
// Tick. Two locks (docs/architecture.md, "The write path"): op_mu_ serialises every change that
// writes to the store (a cancel, a registration, a rank's end, a tick); mu_ guards the state in
// memory and is held briefly by everyone, readers included. A change's write goes to the one writer
// (GroupCommitStore), which commits it in a batch with the others queued meanwhile while the change
// waits with mu_ released and op_mu_ held: readers see the state as it was until the write is on
// disk, then the change applied. Submits take only mu_ (a new job touches nothing else until it is
// stored), so concurrent submits share batches. Heartbeats take neither: the LeaseBook has its own
// lock. Step reports take mu_ alone, briefly: checked and kept (the newest per rank), then folded
// in by the tick (or before any other message of the same stream), so telemetry is no change.
// Nothing in here blocks on the network (WorkerChannel and WatchFn only queue). The RendezvousStore
// has its own lock.
//
// Events: the JobManager stores every change first, then tells its listeners (the
// MetricsAggregator, the JobWatchers). A change the store refuses fails the RPC that asked for it
// and changes nothing; one that no RPC waits for (a lost worker, a rank's end) is retried from Tick
// until it is stored.
//
// The Controller keeps the entry points and the lock; the decisions are its managers': the attempt
// lifecycle (attempt_lifecycle.h: placement to end), the scheduling pass (queue_scheduler.h,
// victims chosen on a snapshot by preemption.h), admission checks (admission.h), log requests
// (log_requests.h). controller.cc holds the entry points, job_admin.cc listing and retention.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "controller/admission.h"
#include "controller/attempt_lifecycle.h"
#include "controller/clock.h"
#include "controller/config.h"
#include "controller/group_commit.h"
#include "controller/job_manager.h"
#include "controller/job_watchers.h"
#include "controller/log_requests.h"
#include "controller/metrics_aggregator.h"
#include "controller/node_credentials.h"
#include "controller/queue_scheduler.h"
#include "controller/registration_gate.h"
#include "controller/rendezvous.h"
#include "controller/state_store.h"
#include "controller/worker_registry.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// `from` in ListJobs' JOB_VIEW_BASIC into `to` (empty): every field but the spec's body, which
// keeps its api_version, kind, metadata and parallelism (job_admin.cc).
void CopyBasicView(const moe::v1::Job& from, moe::v1::Job* to);

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
  // `actor` (every state-changing call): the name of the caller's token, recorded in the job's
  // events and the log; empty without authentication.
  StatusOr<moe::v1::Job> Submit(const moe::v1::TrainingJob& job, const std::string& request_id = "",
                                const std::string& actor = "") ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Job> Get(const std::string& id, bool with_events) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Job> List(const std::vector<moe::v1::JobState>& states)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One page of jobs, oldest first, filtered by state and id prefix, each in the request's view
  // (job_admin.cc).
  StatusOr<moe::v1::ListJobsResponse> ListPage(const moe::v1::ListJobsRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A rank's output from the worker that runs or ran it: `done` is called once, with the slice, or
  // with why there is none (no such job or rank, the worker gone, no answer within 10 s).
  using LogsDone = LogRequests::Done;
  void RequestLogs(const moe::v1::GetLogsRequest& req, LogsDone done) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a job. Its ranks checkpoint at their next step boundary and stop, unless `now` (killed
  // at once).
  StatusOr<moe::v1::Job> Cancel(const std::string& id, const std::string& actor = "",
                                bool now = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a finished job and its events; FAILED_PRECONDITION while it is live.
  Status Delete(const std::string& id, const std::string& actor = "") ABSL_LOCKS_EXCLUDED(mu_);
  // `after_seq`: only the past events after it (a watch resuming after a reconnect).
  StatusOr<int64_t> Watch(const std::string& id, WatchFn fn, int64_t after_seq = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unwatch(int64_t subscription) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Worker> Workers() ABSL_LOCKS_EXCLUDED(mu_);
  // One page of the workers by name (WorkerRegistry::Page), without describing the rest.
  void WorkersPage(const std::string& after, size_t limit, size_t max_bytes,
                   moe::v1::ListWorkersResponse* resp) ABSL_LOCKS_EXCLUDED(mu_);
  // The queues with their quotas and usage (moectl get queues); one, "default", without --queues.
  std::vector<moe::v1::QueueStatus> Queues() ABSL_LOCKS_EXCLUDED(mu_);
  // Every rack with its workers by state and its spares (moectl get racks; --spares-per-rack).
  moe::v1::ListRacksResponse Racks() ABSL_LOCKS_EXCLUDED(mu_);
  // Drains (no new work) or undrains a worker. `move_work` (drain only): its rank also checkpoints
  // and stops, and its job continues elsewhere without using a restart (as when the worker leaves).
  StatusOr<moe::v1::Worker> SetDrained(const std::string& name, bool drained,
                                       const std::string& actor = "", bool move_work = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a worker that is not connected (lost); FAILED_PRECONDITION for a connected one (stop
  // its moe-worker: SIGTERM leaves cleanly and removes it).
  Status DeleteWorker(const std::string& name, const std::string& actor = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  // Node identity (node_admin.cc, node_credentials.h). Bootstrap: a node credential for the node,
  // once (`actor`: the bootstrap token's name). DeleteNode revokes the node's credential, closes
  // its agents' streams and forgets its workers (their ranks are lost: their jobs restart).
  // DeleteWorkers forgets every lost worker, in one write.
  StatusOr<moe::v1::BootstrapResponse> Bootstrap(const moe::v1::BootstrapRequest& req,
                                                 const std::string& actor) ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::DeleteWorkersResponse> DeleteNode(const std::string& node,
                                                      const std::string& actor)
      ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::DeleteWorkersResponse> DeleteWorkers(moe::v1::WorkerState state,
                                                         const std::string& actor)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The node credentials (thread-safe: the gRPC layer looks callers up without the lock).
  const NodeCredentials& node_credentials() const { return credentials_; }

  // WorkerService: a node agent's stream. Register first; then its messages; then Disconnected.
  // Each of the agent's devices is a worker of its own (worker_claims.h, DeviceWorkerName): ranks
  // are placed on and listed per device, while the agent's one stream carries them all and its one
  // lease keeps them. The stream is the agent's identity: a message about a rank of a running
  // attempt that none of its devices holds is refused with PERMISSION_DENIED (the stream then
  // ends) and changes nothing. `agent` below is the name the stream registered.
  // `id`: who the stream's caller is (node_credentials.h): with a node credential, the registration
  // names that node and rack, and names of that node only; with an mTLS certificate, a node among
  // its names.
  StatusOr<moe::v1::Registered> Register(const moe::v1::Register& reg, WorkerChannel* channel,
                                         const WorkerIdentity& id = {}) ABSL_LOCKS_EXCLUDED(mu_);
  Status OnWorkerMessage(const std::string& agent, const moe::v1::WorkerMessage& msg)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The workers' leases (thread-safe): a heartbeat renews its stream's lease there and nothing
  // else, taking neither controller lock (Renew with the stream as its WorkerChannel*).
  LeaseBook& leases() { return leases_; }
  // Registrations in flight and the names being registered (registration_gate.h): the stream
  // calls registrations().Begin() before Register and End(admitted) after it when Begin was OK.
  RegistrationGate& registrations() { return registrations_; }
  // The rendezvous keys the agent holding `session` may use: the prefixes of the attempts its
  // devices run. UNAUTHENTICATED without a live session, PERMISSION_DENIED when it runs no rank.
  StatusOr<std::vector<std::string>> RendezvousScope(const std::string& session)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A rendezvous caller's node credential (`node`; empty without tokens) is its session's node's.
  Status CheckSessionNode(const std::string& session, const std::string& node)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Disconnected(const std::string& agent, WorkerChannel* channel) ABSL_LOCKS_EXCLUDED(mu_);
  RendezvousStore& rendezvous() { return rendezvous_; }

  // Leases, reconnect deadlines, retries of unstored changes, rendezvous timeouts, a scheduling
  // pass and the cluster's metrics. Call about every 100 ms.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // A scheduling pass now, as the tick runs (a submit under a queue is placed by the next one).
  void SchedulePass() ABSL_LOCKS_EXCLUDED(mu_);
  // The step reports kept since the last tick, folded in now, as the tick does first.
  void FoldSteps() ABSL_LOCKS_EXCLUDED(mu_);
  // A clean stop (SIGTERM, a rolling update) begins: from now on a closing worker stream is the
  // controller going away, not the worker, and changes nothing stored. Its workers keep their ranks
  // running and reconnect to the next controller, which carries the jobs on (as after kill -9).
  void BeginShutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // The reason this controller must stop, when another one took over its state since it started (a
  // higher fencing epoch is stored: Tick checks every few seconds); empty while it holds the state.
  std::string Fenced() ABSL_LOCKS_EXCLUDED(mu_);
  // With --store etcd (main.cc, before serving): how to hand the leadership to a standby.
  void SetStepDown(std::function<Status()> step_down) { step_down_ = std::move(step_down); }
  // moectl admin step-down: the leader steps down (its process then stops); FAILED_PRECONDITION
  // where there is no standby to take over (the embedded SQLite store).
  Status StepDown(const std::string& actor);

 private:
  Status RestoreWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StatusOr<std::string> AdmitWorker(const moe::v1::Register& reg,
                                    const std::vector<moe::v1::Register>& devices,
                                    WorkerChannel* channel, const WorkerIdentity& id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The devices a registration adds fit --max-workers (live workers) and, for a node credential,
  // --max-devices-per-node (the node's lost workers without a rank are forgotten first, oldest
  // first, to make room: lost ones count toward no limit).
  Status CheckWorkerQuotas(const moe::v1::Register& reg, size_t fresh, const WorkerIdentity& id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A node's credential goes once its last worker is forgotten: it may bootstrap again.
  void DropCredentialIfNodeEmpty(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `names` in one store write (DeleteWorkers, and room on a node).
  Status ForgetWorkers(const std::vector<std::string>& names, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit's checks and record; `queued_before`: the jobs waiting when it was admitted.
  StatusOr<moe::v1::Job> Admit(JobSpec spec, const std::string& request_id,
                               const std::string& actor, size_t* queued_before)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A reconnecting agent's device: what it says it runs is bound to the attempt we know, or told to
  // stop; a rank it was assigned but does not report is lost.
  void ReconcileRanks(const moe::v1::Register& reg, WorkerChannel& channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker says it is leaving (Leaving): no new work; its job is requeued.
  void WorkerLeaving(const std::string& name, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a worker: the registry's entry and the stored one (the name is free again).
  Status ForgetWorker(const std::string& name, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PruneLostWorkers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker on default checkpoint roots is offered the controller's own (Registered
  // .checkpoint_root): on this host it is there (this controller made it) and counts at once;
  // elsewhere it counts once the worker reports it mounted (CheckpointRootMounted).
  void OfferCheckpointRoot(const moe::v1::Register& reg, moe::v1::Registered* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CheckpointRootMounted(const std::string& agent, const moe::v1::CheckpointRootMounted& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finished jobs older than the retention go, with their events (job_admin.cc).
  void ExpireFinishedJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank's step report, checked and kept (the newest per rank) under mu_ alone: step telemetry
  // takes no change lock. DrainSteps folds the kept ones in (the tick, and any other message of a
  // rank first, so that a rank's last step comes before its end).
  Status KeepStep(const std::string& agent, const moe::v1::WorkerMessage& msg)
      ABSL_LOCKS_EXCLUDED(mu_);
  void DrainSteps() ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_, mu_);
  void PublishClusterMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // held by every change that writes (see above)
  Mutex mu_;
  RegistrationGate registrations_;                   // its own lock
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;  // BeginShutdown
  // The fencing epoch this controller took at Recover (sent in Registered and every Assignment),
  // the last time the stored one was compared with it, and why it must stop when a higher one was
  // found.
  int64_t epoch_ = 0;
  double epoch_checked_ = 0;
  NodeCredentials credentials_;       // its own lock
  DataRootsView data_roots_;          // its own lock: read by Submit outside mu_ (admission.h)
  double cluster_metrics_at_ = -1e9;  // monotonic second the cluster's figures were last published
  double cluster_metrics_every_ = 1.0;  // seconds between two: 1, longer where a walk costs more
  std::string fenced_;
  std::function<Status()> step_down_;  // set before serving, then only read
  const std::string host_id_;          // this machine (common/host_id.h)
  StateStore& store_;           // reads (LoadWorkers, StoredEpoch); every write goes through:
  GroupCommitStore committer_;  // the one writer (its batches commit with mu_ released)
  Clock& clock_;
  MetricsAggregator& metrics_;  // used under mu_ (it is not thread-safe)
  const ControllerConfig config_;
  CheckpointKeys checkpoint_keys_;  // its own lock: jobs_'s checkpoint key
  JobManager jobs_ ABSL_GUARDED_BY(mu_);
  JobWatchers watchers_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  LeaseBook& leases_;  // workers_'s leases (thread-safe: heartbeats renew them without mu_)
  RendezvousStore rendezvous_;  // has its own lock
  AttemptLifecycle attempts_ ABSL_GUARDED_BY(mu_);
  QueueScheduler scheduler_ ABSL_GUARDED_BY(mu_);
  LogRequests logs_ ABSL_GUARDED_BY(mu_);
  // KeepStep's reports by (job, attempt, rank): bounded by the ranks placed (each was checked to be
  // its sender's).
  std::map<std::tuple<std::string, int, int>, moe::v1::StepReport> pending_steps_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::controller
