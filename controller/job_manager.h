// Jobs: their records, the state machine and their events.
//
// Every change takes one path: store it (the job's new record and the event that explains it, in
// one atomic write), then apply it in memory, then tell the listeners (job_listener.h). When the
// store fails the change is refused with the store's Status and memory stays as it was, so what the
// controller acknowledges is what a restarted controller loads.
//
// Not thread-safe: the Controller serialises every call under its mutex; listeners run inside
// calls.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/job_spec.h"
#include "common/job_state.h"
#include "common/status.h"
#include "controller/clock.h"
#include "controller/group_commit.h"
#include "controller/job_listener.h"
#include "controller/scheduler.h"
#include "controller/state_store.h"
#include "moe/v1/job.pb.h"

namespace moe::controller {

// Bounds of what a submit may carry (docs/operations.md, "Limits").
inline constexpr size_t kMaxJobDocumentBytes = 64 << 10;
inline constexpr size_t kMaxRequestIdBytes = 128;

// `path` without repeated or trailing slashes and "." components (lexically; no file system).
std::string NormalizePath(const std::string& path);

// PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, with RESTARTING between
// attempts; a cancel or the time limit passes through STOPPING (CANCELLED, TIMEOUT) while ranks
// run.
bool ValidTransition(moe::v1::JobState from, moe::v1::JobState to);
// Waiting for placement: PENDING, or RESTARTING between attempts.
bool IsQueued(moe::v1::JobState s);

// Why a queued job waits, as the last scheduling pass found it: what the operator's alerts tell
// apart (a full quota is expected on a busy cluster; a job that waits with quota and capacity is
// not). moe_queue_waiting_jobs{queue, reason} counts them by WaitClassName.
enum class WaitClass {
  kNone,        // not waiting, or not considered yet (exported as "stuck" while it waits)
  kQuota,       // its queue's quota, or its cohort's, does not admit it
  kCapacity,    // it does not fit even on every live worker: the cluster lacks its shape
  kBusy,        // admitted and feasible, but the workers are taken by jobs it may not preempt
  kDependency,  // metadata.depends_on
  kBackoff,     // the restart back-off after a failure
  kPreempting,  // the jobs it preempted have not stopped yet
  kHeld,        // behind a higher-priority job's preemption, or its cohort reclaiming lent quota
  kStuck,       // anything else (its start was refused by the store)
};
inline constexpr WaitClass kWaitClasses[] = {
    WaitClass::kQuota,   WaitClass::kCapacity,   WaitClass::kBusy, WaitClass::kDependency,
    WaitClass::kBackoff, WaitClass::kPreempting, WaitClass::kHeld, WaitClass::kStuck};
const char* WaitClassName(WaitClass c);

struct RankStatus {
  bool finished = false;
  bool ok = false;
  bool started = false;  // its worker said RankStarted, or it reported a step
};

// Why an attempt stops before its ranks finished.
enum class StopCause {
  kFailure,    // a failure a restart may fix: uses one of max_restarts
  kPermanent,  // the job cannot run as specified: FAILED, no restart
  kRequeue,  // not the job's doing (a worker left cleanly, a drain, an elastic resize): back in the
             // queue
  kPreempted,  // a job of higher priority needs the capacity: PREEMPTED, resumes later
};

// Why an attempt failed; the attempt lifecycle records it in the job (RESTARTING, PREEMPTED or
// FAILED), retrying from Tick while the store refuses it.
struct AttemptFailure {
  std::string reason;
  StopCause cause = StopCause::kFailure;
  bool event_stored =
      false;  // its "AttemptFailed" (or Requeued, Preempted) event is in the history
};

// The attempt now running or ending.
struct Attempt {
  int number = 0;
  std::vector<Slot> slots;  // rank order
  std::vector<RankStatus> ranks;
  bool ending = false;  // cancel sent; waiting for ranks to stop
  // After a controller restart: the monotonic time after which a rank that has not reported back
  // is lost; it moves on while the registration gate admits the herd (CheckReconnect). 0: none.
  double reconnect_deadline = 0;
  std::optional<AttemptFailure> failure;
  double start_deadline = 0;  // monotonic: every rank must have started by then (0: no deadline)
  // The checkpoint every rank that ended with a record had (the lowest of theirs: a checkpoint is
  // whole once all wrote it); -1: none reported. The final transition records it on the job.
  int64_t end_checkpoint = -1;
  size_t end_records = 0;  // ranks that ended with their own record (ok, or stopped on request)
  // For the plausibility of its reports (PlausibleStep): when it was placed (monotonic; a restored
  // attempt: when the controller restarted) and the furthest step any of its ranks reported.
  double placed_at = 0;
  int64_t last_step = 0;
  // Successes that came before the last step's report (another agent's rank may carry it and be
  // slower to forward it): held until it comes, or doubted at the deadline (monotonic).
  std::map<int, moe::v1::RankFinished> pending_ok;
  double pending_deadline = 0;
  int live_ranks() const {
    int n = 0;
    for (const auto& r : ranks) n += (!r.finished) ? 1 : 0;
    return n;
  }
};

struct JobEntry {
  moe::v1::Job job;
  JobSpec spec;
  std::unique_ptr<Attempt> attempt;  // null when no ranks run
  int64_t next_event_seq = 1;
  double last_persist = 0;     // monotonic time the record was last stored
  std::string waiting_reason;  // why the last scheduling pass did not place it (queued jobs)
  WaitClass wait_class = WaitClass::kNone;  // the same, as a class
  int64_t memory_need = -1;                 // bytes per rank (RankMemoryNeed; -1: not computed yet)
  std::string resolved_checkpoint_dir;  // its checkpoint directory, links resolved (admission.cc;
                                        // "": not yet)
  double not_before = 0;  // monotonic: a restarting job is not placed before this (restart backoff)
  std::vector<std::string>
      preempting;  // a queued job waiting for the jobs it preempted to stop: their ids
  std::map<int, std::vector<std::string>>
      attempt_workers;  // attempt -> workers by rank (moectl logs; not stored)
  // A write of this job's record waits for its batch (the controller's lock released meanwhile):
  // telemetry saved then would be older than it, so it is not stored (the next save carries it).
  bool writing = false;
  // Submitted, its record not on disk yet: nobody sees it (Find, All) but the admission checks.
  bool creating = false;
};

class JobManager {
 public:
  // A change to the rest of a job's record made along with a transition (attempt, placement, ...).
  using Edit = std::function<void(moe::v1::Job&)>;

  // `committer`, when given, is `store` as the controller's one writer: a write waits for its batch
  // with the controller's lock released (callers serialize their writes: Controller's op_mu_; only
  // Create runs beside them), and telemetry joins the batches without waiting (Persist).
  JobManager(StateStore& store, Clock& clock, GroupCommitStore* committer = nullptr)
      : store_(store), clock_(clock), committer_(committer) {}

  // Told of every change from now on, in the order added. Not owned; must outlive the manager.
  void AddListener(JobListener* listener) { listeners_.push_back(listener); }

  // Loads the jobs stored by an earlier run of the controller; listeners see each as new.
  Status Load();
  // A fresh id for a job named `name` (name-xxxxx), unique among the jobs known.
  std::string NewId(const std::string& name) const;
  // Stores a new PENDING job and its "Submitted" event.
  StatusOr<JobEntry*> Create(const std::string& id, const moe::v1::TrainingJob& expanded,
                             const JobSpec& spec, const std::string& request_id = "",
                             const std::string& actor = "");
  // Removes a finished job and its events from the store, then from memory.
  Status Delete(const std::string& id);
  JobEntry* Find(const std::string& id);
  std::vector<JobEntry*> All();
  // All() with the jobs being created (their records not on disk yet): for the admission checks, so
  // that two submits in flight at once cannot both take one name or checkpoint directory.
  std::vector<JobEntry*> AllWithCreating();
  // The jobs' indexes, kept as jobs come and go (those being created included), so that a submit's
  // checks look at the few jobs that can matter instead of every job (a walk over every job under
  // the lock was a fifth of the controller's time in bench/load.py's submits): by request id, and
  // by the key of the checkpoint directory, which `key` computes (admission.h: the directory with
  // its links resolved; also kept in JobEntry::resolved_checkpoint_dir). Set before Load.
  void SetCheckpointKey(std::function<std::string(const std::string& dir)> key);
  JobEntry* FindByRequestId(const std::string& request_id);
  // The key of `dir` (the key function's; "" without one). The last is remembered until the next
  // job is indexed: a submit's check and its Create ask for the same directory, and resolving it
  // costs system calls.
  std::string CheckpointKey(const std::string& dir);
  void ForgetCheckpointKey() { last_dir_.clear(); }
  // The jobs whose checkpoint key is `key`, lies beneath it or holds it (at a '/'); without a key
  // function, every job.
  std::vector<JobEntry*> CheckpointNeighbours(const std::string& key);
  // Jobs PENDING, PREEMPTED or RESTARTING (those being created included): kept as the jobs change,
  // so that a submit, which asks on every call, does not walk every job.
  size_t CountQueued() const { return queued_.size(); }
  // The same jobs (those being created left out), and the jobs with an attempt (ranks placed, maybe
  // still ending), each in id order: what a scheduling pass, the queues' usage and a preemption's
  // candidates walk, rather than every job (walks of every job under the lock were a tenth of the
  // controller's time in bench/load.py's submits). AttemptChanged keeps the second: the attempt's
  // owner calls it after setting or clearing JobEntry::attempt.
  std::vector<JobEntry*> Queued();
  std::vector<JobEntry*> WithAttempt();
  void AttemptChanged(JobEntry& e);
  // How many queued jobs wait for placement (no attempt; not being created), by their
  // JobSpec::queue ("": the default queue): ListQueues' pending counts without a walk.
  const std::map<std::string, int64_t>& WaitingByQueue() const { return waiting_; }
  // Up to `limit` jobs created after (created_at, id) = `after`, oldest first, that `match` takes
  // (those being created left out): a ListJobs page walks from its token, not over every job.
  std::vector<const JobEntry*> CreatedAfter(const std::pair<double, std::string>& after,
                                            size_t limit,
                                            const std::function<bool(const JobEntry&)>& match);

  // Moves a job to `to` with an event of `type`; `edit` changes the rest of the new record.
  Status Transition(JobEntry& e, moe::v1::JobState to, const std::string& type,
                    const std::string& message, const Edit& edit = nullptr);
  // Several transitions (a scheduling pass's placements) stored in one write, all or none: each
  // job moves as Transition moves it, and a refused write leaves every one as it was.
  struct TransitionRequest {
    JobEntry* e;
    moe::v1::JobState to;
    std::string type, message;
    Edit edit;
  };
  Status TransitionAll(const std::vector<TransitionRequest>& changes);
  // An event that does not change the state.
  Status Event(JobEntry& e, const std::string& type, const std::string& message);
  // A step's job-level metrics: kept in the record (stored at most every kMetricsPersistSeconds)
  // and published.
  Status PublishMetrics(JobEntry& e, const moe::v1::StepMetrics& m);
  // A checkpoint newer than the record's that the ranks' final records reported (a preempted or
  // requeued attempt's stop checkpoint: written after its last step report): the job's
  // checkpoint_step, and its age from now. Stored with the next batch, as telemetry is.
  Status RecordCheckpoint(JobEntry& e, int64_t step);
  static constexpr double kMetricsPersistSeconds = 5.0;

  StatusOr<std::vector<moe::v1::JobEvent>> Events(const std::string& id) {
    return store_.LoadEvents(id);
  }

 private:
  moe::v1::JobEvent NewEvent(const JobEntry& e, const moe::v1::Job& record, const std::string& type,
                             const std::string& message) const;
  // A transition's new record and event, checked (ValidTransition) but not stored yet; Apply makes
  // it the job's once stored.
  struct Staged {
    moe::v1::JobState from;
    JobWithEvent write;
  };
  StatusOr<Staged> Stage(const JobEntry& e, const TransitionRequest& t) const;
  void Apply(JobEntry& e, Staged staged);
  // Stores `record` and, once stored, makes it e.job.
  Status Persist(JobEntry& e, moe::v1::Job record);
  // Marks a write of `e`'s record in flight (JobEntry::writing) for the scope.
  struct Writing {
    explicit Writing(JobEntry& e) : e(e) { e.writing = true; }
    ~Writing() { e.writing = false; }
    JobEntry& e;
  };

  StateStore& store_;
  Clock& clock_;
  GroupCommitStore* committer_;
  // Replaces e.job with `record`, keeping queued_.
  void SetRecord(JobEntry& e, moe::v1::Job record);
  void Index(JobEntry* e);
  void Unindex(JobEntry* e);
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  // jobs_ whose state IsQueued, and those with an attempt, by id; every job by (created_at, id).
  std::map<std::string, JobEntry*> queued_, with_attempt_;
  std::map<std::pair<double, std::string>, JobEntry*> by_created_;
  std::map<std::string, int64_t> waiting_;  // WaitingByQueue
  // Counts `e` in waiting_ (delta +1), or no longer (-1), when it waits: around every change of
  // its state, attempt or creation.
  void CountWaiting(const JobEntry& e, bool has_attempt, int64_t delta);
  std::function<std::string(const std::string&)> checkpoint_key_;
  std::string last_dir_, last_key_;  // CheckpointKey's last
  std::unordered_map<std::string, JobEntry*> by_request_;
  std::multimap<std::string, JobEntry*> by_checkpoint_;
  std::vector<JobListener*> listeners_;
};

}  // namespace moe::controller
