// The Controller's entry points: recovery, JobService, WorkerService and Tick. What happens to an
// attempt between its placement and its end is in attempt_lifecycle.cc.
#include "controller/controller.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "common/file_util.h"
#include "common/host_id.h"
#include "common/job_spec_proto.h"
#include "common/log.h"
#include "controller/admission.h"
#include "controller/controller_internal.h"
#include "controller/dependencies.h"
#include "controller/goodput.h"
#include "controller/worker_claims.h"

namespace moe::controller {

using moe::v1::JobState;

namespace {

// A clock far ahead of everything stored (a wrong NTP step, a VM restored with another clock) would
// make the finished-job retention delete at once what it should keep for weeks: refused unless the
// operator says the jump is real (--allow-clock-jump).
Status CheckClock(JobManager& jobs, const Clock& clock, bool allow_clock_jump) {
  constexpr double kClockJumpSeconds = 7 * 86400;
  double newest = 0;
  for (JobEntry* e : jobs.All()) newest = std::max(newest, e->job.updated_at());
  const double ahead = clock.Now() - newest;
  if (newest <= 0 || ahead <= kClockJumpSeconds || allow_clock_jump) return OkStatus();
  return FailedPreconditionError(
      "the clock reads " + std::to_string(static_cast<int64_t>(ahead / 86400)) +
      " days past the newest stored change: if it is wrong, fix it (nothing was "
      "changed); if the controller really was stopped that long, pass "
      "--allow-clock-jump");
}

// PERMISSION_DENIED when a message of the node agent `agent` concerns a rank of a running attempt
// that none of its devices holds.
Status CheckRankOwner(JobManager& jobs, const std::string& agent, const std::string& job_id,
                      int attempt, int rank) {
  JobEntry* e = jobs.Find(job_id);
  if (e == nullptr || !e->attempt || e->attempt->number != attempt) return OkStatus();
  const auto& slots = e->attempt->slots;
  if (rank < 0 || rank >= static_cast<int>(slots.size()) ||
      AgentOfWorker(slots[static_cast<size_t>(rank)].worker) != agent) {
    return PermissionDeniedError("worker " + agent + " does not run rank " + std::to_string(rank) +
                                 " of " + job_id + " attempt " + std::to_string(attempt));
  }
  return OkStatus();
}

constexpr int kMaxStepsPerMessage = 64;  // StepReports (the agents': worker/agent/rank_messages.h)

Status CheckStep(JobManager& jobs, const std::string& worker, const moe::v1::StepReport& s) {
  MOE_RETURN_IF_ERROR(CheckRankOwner(jobs, worker, s.job_id(), s.attempt(), s.rank()));
  const JobEntry* e = jobs.Find(s.job_id());
  if (e == nullptr) return OkStatus();
  const auto& m = e->spec.model;
  return ValidateStepReport(s, static_cast<int>(m.num_layers + m.mtp_depth),
                            static_cast<int>(e->spec.parallelism.world_size));
}

// PERMISSION_DENIED for a rank another worker holds; INVALID_ARGUMENT for one out of bounds.
Status CheckWorkerMessage(JobManager& jobs, const std::string& worker,
                          const moe::v1::WorkerMessage& msg, const std::string& checkpoint_root) {
  switch (msg.msg_case()) {
    case moe::v1::WorkerMessage::kStep:
      return CheckStep(jobs, worker, msg.step());
    case moe::v1::WorkerMessage::kSteps:
      if (msg.steps().reports_size() > kMaxStepsPerMessage) {
        return InvalidArgumentError("steps: " + std::to_string(msg.steps().reports_size()) +
                                    " reports in one message; at most " +
                                    std::to_string(kMaxStepsPerMessage));
      }
      for (const auto& s : msg.steps().reports()) MOE_RETURN_IF_ERROR(CheckStep(jobs, worker, s));
      return OkStatus();
    case moe::v1::WorkerMessage::kStarted:
      return CheckRankOwner(jobs, worker, msg.started().job_id(), msg.started().attempt(),
                            msg.started().rank());
    case moe::v1::WorkerMessage::kFinished: {
      const auto& f = msg.finished();
      if (f.message().size() > kMaxMessageBytes) {
        return InvalidArgumentError("rank finished: message over 4096 bytes");
      }
      return CheckRankOwner(jobs, worker, f.job_id(), f.attempt(), f.rank());
    }
    case moe::v1::WorkerMessage::kRegister:
      return InvalidArgumentError("register: only the stream's first message registers");
    case moe::v1::WorkerMessage::kCheckpointRootMounted:  // only the root it was offered
      if (msg.checkpoint_root_mounted().root() != checkpoint_root)
        return InvalidArgumentError(
            "checkpoint root mounted: " + msg.checkpoint_root_mounted().root().substr(0, 256) +
            " is not the controller's checkpoint root");
      return OkStatus();
    case moe::v1::WorkerMessage::kLogReply:  // what it asked for is at most 1 MiB
                                             // (worker/agent/rank_log.h)
      if (msg.log_reply().text().size() > (size_t{2} << 20))
        return InvalidArgumentError("log reply: text over 2 MiB");
      return OkStatus();
    default:
      return OkStatus();
  }
}

}  // namespace

Controller::Controller(StateStore& store, Clock& clock, MetricsAggregator& metrics,
                       const ControllerConfig& config)
    : registrations_([&clock] { return clock.Monotonic(); }),
      host_id_(ThisHostId()),
      store_(store),
      committer_(store),
      clock_(clock),
      metrics_(metrics),
      config_(config),
      checkpoint_keys_(config.checkpoint_root),
      jobs_(committer_, clock, &committer_),
      workers_(clock, config.lease_seconds),
      leases_(workers_.leases()),
      attempts_(jobs_, workers_, rendezvous_, metrics, clock, config_),
      scheduler_(jobs_, workers_, attempts_, metrics, clock, config_),
      logs_(jobs_, workers_, clock) {
  committer_.SetCallerLock(&mu_);
  attempts_.WatchHerd(&registrations_);
  metrics_.SetGoodputFloor(config_.goodput_floor);
  const QueueBook& book = scheduler_.book();
  metrics_.SetDefaultQueue(book.enabled() ? book.config().default_queue : kDefaultQueue);
  std::map<std::string, double> slos;
  for (const QueueSpec& q : book.config().queues) slos[q.name] = q.wait_slo_seconds;
  metrics_.SetWaitSlos(slos);
  jobs_.AddListener(&metrics_);
  jobs_.AddListener(&watchers_);
  jobs_.SetCheckpointKey([this](const std::string& dir) { return checkpoint_keys_.Key(dir); });
}

Status Controller::Recover() {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  MOE_ASSIGN_OR_RETURN(epoch_, committer_.NextEpoch());
  attempts_.SetEpoch(epoch_);
  MOE_RETURN_IF_ERROR(jobs_.Load());
  MOE_RETURN_IF_ERROR(CheckClock(jobs_, clock_, config_.allow_clock_jump));
  MOE_RETURN_IF_ERROR(RestoreWorkers());
  int running = 0;
  for (JobEntry* e : jobs_.All()) {
    const JobState s = e->job.state();
    if (s != moe::v1::SCHEDULED && s != moe::v1::RUNNING && s != moe::v1::STOPPING) continue;
    MOE_RETURN_IF_ERROR(attempts_.AwaitReconnect(*e));
    // A stop under way goes on: its ranks are told again as their workers report back, and it
    // ends once they ended (or did not report back within the grace).
    if (s == moe::v1::STOPPING) e->attempt->ending = true;
    ++running;
  }
  MOE_LOG(INFO) << "recovered " << jobs_.All().size() << " jobs (" << running << " running, "
                << jobs_.CountQueued() << " queued)";
  return OkStatus();
}

// Every worker name stays held by its session through the restart: its worker gets the reconnect
// grace and a lease to come back before anyone else may take the name.
Status Controller::RestoreWorkers() {
  MOE_ASSIGN_OR_RETURN(std::vector<StoredWorker> stored, store_.LoadWorkers());
  for (const auto& w : stored) {
    workers_.Restore(w.info, w.session, config_.reconnect_grace_seconds + config_.lease_seconds);
  }
  MOE_ASSIGN_OR_RETURN(const std::vector<moe::v1::NodeCredential> credentials,
                       store_.LoadNodeCredentials());
  credentials_.Load(credentials);
  return OkStatus();
}

StatusOr<moe::v1::Job> Controller::Submit(const moe::v1::TrainingJob& submitted,
                                          const std::string& request_id, const std::string& actor) {
  if (request_id.size() > kMaxRequestIdBytes) {
    return InvalidArgumentError("request_id: at most " + std::to_string(kMaxRequestIdBytes) +
                                " bytes");
  }
  if (const size_t bytes = submitted.ByteSizeLong(); bytes > kMaxJobDocumentBytes) {
    return InvalidArgumentError("job: the document is " + std::to_string(bytes) +
                                " bytes; at most " + std::to_string(kMaxJobDocumentBytes) +
                                " (a path or name that long is a mistake)");
  }
  MOE_ASSIGN_OR_RETURN(JobSpec spec, SpecFromProto(submitted));
  MOE_RETURN_IF_ERROR(ApplyPriorityClass(config_, &spec));
  MOE_RETURN_IF_ERROR(CheckDatasetVisible(spec, data_roots_));  // stat() outside the lock
  size_t queued_before = 0;
  MOE_ASSIGN_OR_RETURN(moe::v1::Job out, Admit(std::move(spec), request_id, actor, &queued_before));
  // Placed now when it is the only job waiting and no change is under way; else by the next tick's
  // pass (100 ms): a submit never waits behind another change's writes, nor pays for a burst's
  // placements (each a write).
  if (queued_before == 0 && op_mu_.TryLock()) {
    {
      MutexLock lock(&mu_);
      scheduler_.Run();
    }
    op_mu_.Unlock();
  }
  return out;
}

// Submit's checks and its record: with mu_ alone (the write waits with it released, in a batch
// with the other submits of the moment); the job is seen by nobody until its record is stored.
StatusOr<moe::v1::Job> Controller::Admit(JobSpec spec, const std::string& request_id,
                                         const std::string& actor, size_t* queued_before) {
  MutexLock lock(&mu_);
  jobs_.ForgetCheckpointKey();  // resolved afresh for this submit (CheckCheckpointDirFree)
  *queued_before = jobs_.CountQueued();
  if (JobEntry* e = request_id.empty() ? nullptr : jobs_.FindByRequestId(request_id)) {
    if (e->creating) return UnavailableError("request_id: a submit with it is being stored; retry");
    return e->job;  // a retry: the job it created
  }
  // A job larger than the cluster registered now waits for capacity (a controller started before
  // its workers, a cluster growing): only a job over the configured ceiling is refused.
  if (config_.max_job_ranks > 0 && spec.parallelism.world_size > config_.max_job_ranks) {
    return FailedPreconditionError(
        "the job can never fit: spec.parallelism.world_size " +
        std::to_string(spec.parallelism.world_size) + " exceeds this controller's ceiling of " +
        std::to_string(config_.max_job_ranks) + " ranks per job (--max-job-ranks)");
  }
  MOE_RETURN_IF_ERROR(CheckMemoryFits(spec, workers_));
  MOE_ASSIGN_OR_RETURN(spec.queue, scheduler_.book().Resolve(spec.queue));
  MOE_RETURN_IF_ERROR(scheduler_.book().CheckCanEverFit(spec.queue, spec.resources.device,
                                                        spec.parallelism.world_size));
  MOE_RETURN_IF_ERROR(ResolveDependencies(&spec, actor, jobs_));
  const std::string id = jobs_.NewId(spec.name);
  const bool default_dir = spec.checkpoint.dir.empty() && !config_.checkpoint_root.empty();
  if (default_dir) spec.checkpoint.dir = JoinPath(config_.checkpoint_root, id);
  int64_t inherited = 0;  // a resubmission's predecessor's newest checkpoint, in its directory
  MOE_RETURN_IF_ERROR(
      CheckCheckpointDirFree(spec, actor, jobs_, checkpoint_keys_.ResolvedRoot(), &inherited));
  if (Status st = CheckPathsAllowed(spec, workers_); !st.ok()) {
    if (!default_dir) return st;
    return FailedPreconditionError(
        st.message() + "; the job names no spec.checkpoint.dir, so it went to the controller's " +
        "checkpoint root " + config_.checkpoint_root +
        ", which no live worker allows: give the agents --checkpoint-root with a directory they " +
        "and the controller share (and the controller the same --checkpoint-root), or agents on " +
        "default roots mount it at that path, or name spec.checkpoint.dir");
  }
  MOE_ASSIGN_OR_RETURN(JobEntry * e, jobs_.Create(id, SpecToProto(spec), spec, request_id, actor));
  // Stored with its next record (its placement).
  if (inherited > 0) e->job.set_checkpoint_step(inherited);
  attempts_.NeedSchedule();
  // The writer's figures as of this acknowledgement (a tick may wait behind a change under way).
  metrics_.SetStore(committer_.batches(), committer_.writes(), leases_.stalled_seconds());
  return e->job;
}

StatusOr<moe::v1::Job> Controller::Get(const std::string& id, bool with_events) {
  moe::v1::Job out;
  int64_t interval = 0, devices = 0;
  {
    MutexLock lock(&mu_);
    JobEntry* e = jobs_.Find(id);
    if (e == nullptr) return NotFoundError("no job '" + id + "'");
    out = e->job;
    if (IsQueued(out.state()) && !e->attempt) out.set_waiting_reason(e->waiting_reason);
    interval = e->spec.checkpoint.interval_steps;
    devices = e->spec.parallelism.world_size;
  }
  *out.mutable_goodput() = GoodputAt(out, clock_.Now());  // up to this moment
  if (!AdviseFromRun(out, devices, interval, config_.mtbf_hours, out.mutable_checkpoint_advice()))
    out.clear_checkpoint_advice();
  if (with_events) {  // from the store's reader, without the lock (what is committed)
    MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> events, store_.LoadEvents(id));
    for (auto& ev : events) *out.add_events() = std::move(ev);
  }
  return out;
}

std::vector<moe::v1::Job> Controller::List(const std::vector<JobState>& states) {
  MutexLock lock(&mu_);
  std::vector<moe::v1::Job> out;
  for (JobEntry* e : jobs_.All()) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), e->job.state()) == states.end()) {
      continue;
    }
    out.push_back(e->job);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.created_at() < b.created_at(); });
  return out;
}

StatusOr<moe::v1::Job> Controller::Cancel(const std::string& id, const std::string& actor,
                                          bool now) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  if (IsTerminal(e->job.state())) {
    return FailedPreconditionError("job " + id + " already ended (" +
                                   moe::v1::JobState_Name(e->job.state()) + ")");
  }
  // A stop under way: only --now says more (the ranks killed, the job CANCELLED at once).
  if (e->job.state() == moe::v1::STOPPING && !now) return e->job;
  // Stored before any rank hears of it: a refused cancel leaves the job running.
  const std::string who = "cancelled by " + (actor.empty() ? std::string("a user") : actor);
  if (e->attempt && e->attempt->live_ranks() > 0 && !now) {
    // STOPPING until every rank ended (its workers busy meanwhile), then CANCELLED.
    MOE_RETURN_IF_ERROR(attempts_.BeginStop(
        *e, moe::v1::CANCELLED, who + " (ranks checkpoint at their next step and stop)"));
    return e->job;
  }
  const std::string by =
      who + (e->attempt && now ? " (--now: ranks killed, no checkpoint)" : std::string());
  MOE_RETURN_IF_ERROR(jobs_.Transition(*e, moe::v1::CANCELLED, "Cancelled", by));
  if (e->attempt) {
    attempts_.StopRanks(*e, by, now);
    attempts_.SettleOrRetry(*e);  // ends the attempt at once when no rank was left to stop
  }
  attempts_.NeedSchedule();
  return e->job;
}

StatusOr<int64_t> Controller::Watch(const std::string& id, WatchFn fn, int64_t after_seq) {
  MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> past, jobs_.Events(id));
  std::erase_if(past, [after_seq](const moe::v1::JobEvent& ev) { return ev.seq() <= after_seq; });
  return watchers_.Watch(e->job, past, std::move(fn));
}

void Controller::Unwatch(int64_t subscription) {
  MutexLock lock(&mu_);
  watchers_.Unwatch(subscription);
}

std::vector<moe::v1::Worker> Controller::Workers() {
  MutexLock lock(&mu_);
  return workers_.List();
}

void Controller::WorkersPage(const std::string& after, size_t limit, size_t max_bytes,
                             moe::v1::ListWorkersResponse* resp) {
  MutexLock lock(&mu_);
  workers_.Page(after, limit, max_bytes, resp);
}

moe::v1::ListRacksResponse Controller::Racks() {
  std::map<std::string, RackCount> racks;
  {
    MutexLock lock(&mu_);
    racks = workers_.CountByRack(config_.spares_per_rack);
  }
  moe::v1::ListRacksResponse out;
  out.set_spares_per_rack(config_.spares_per_rack);
  for (const auto& [name, r] : racks) {
    moe::v1::RackStatus* row = out.add_racks();
    row->set_name(name);
    row->set_workers(r.workers);
    row->set_idle(r.idle);
    row->set_busy(r.busy);
    row->set_draining(r.draining);
    row->set_lost(r.lost);
    row->set_spares(r.spares);
    row->set_spares_in_use(r.spares_in_use);
  }
  return out;
}

// `name`: a worker, or a node agent (all its devices; the first is returned).
StatusOr<moe::v1::Worker> Controller::SetDrained(const std::string& name, bool drained,
                                                 const std::string& actor, bool move_work) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  std::vector<std::string> names = {name};
  if (workers_.Find(name) == nullptr) names = workers_.DevicesOf(name);
  if (names.empty()) return NotFoundError("no worker or node agent named '" + name + "'");
  std::vector<moe::v1::Worker> records;  // stored first: a refused write leaves them as they were
  for (const std::string& n : names) {
    records.push_back(workers_.Find(n)->info);
    records.back().set_drained(drained);
  }
  MOE_RETURN_IF_ERROR(committer_.PutWorkers(records, workers_.Find(names.front())->session));
  for (const std::string& n : names) {
    WorkerEntry* w = workers_.Find(n);
    MOE_RETURN_IF_ERROR(workers_.SetDrained(n, drained));
    MOE_LOG(INFO) << "worker " << n << (drained ? " drained" : " undrained")
                  << (actor.empty() ? "" : " by " + actor);
    if (!drained || !move_work || !w->busy()) continue;
    JobEntry* e = attempts_.AttemptOf(w->job_id, w->attempt, w->rank);
    if (e != nullptr && !IsTerminal(e->job.state())) {
      attempts_.Stop(*e,
                     "worker " + n + " (rank " + std::to_string(w->rank) + ") drained" +
                         (actor.empty() ? "" : " by " + actor),
                     StopCause::kRequeue);
    }
  }
  // At once, not at the next once-a-second refresh: a submit right after a drain must not be
  // judged by the drained worker's data roots (a drained '/' made the controller refuse a dataset
  // it could not see).
  data_roots_.Refresh(workers_);
  attempts_.NeedSchedule();
  return workers_.Describe(*workers_.Find(names.front()));
}

Status Controller::DeleteWorker(const std::string& name, const std::string& actor) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  const WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return NotFoundError("no worker named '" + name + "'");
  if (w->channel != nullptr) {
    return FailedPreconditionError(
        "worker " + name +
        " is connected; stop its moe-worker instead (SIGTERM: its rank "
        "checkpoints, the job moves on, and the worker is removed). delete is for lost workers");
  }
  return ForgetWorker(name, "deleted" + (actor.empty() ? std::string() : " by " + actor));
}

Status Controller::ForgetWorker(const std::string& name, const std::string& why) {
  MOE_RETURN_IF_ERROR(
      committer_.DeleteWorker(name));  // stored first: a refused write keeps the worker
  const WorkerEntry* w = workers_.Find(name);
  const std::string node = w != nullptr ? w->info.node() : "";
  if (w != nullptr && w->busy()) attempts_.RankLost(name, "worker " + name + " " + why);
  workers_.Remove(name);
  MOE_LOG(INFO) << "worker " << name << " removed: " << why;
  DropCredentialIfNodeEmpty(node);
  attempts_.NeedSchedule();
  return OkStatus();
}

void Controller::PruneLostWorkers() {
  if (config_.lost_worker_retention_seconds <= 0) return;
  for (const auto& name : workers_.LostLongerThan(config_.lost_worker_retention_seconds)) {
    const std::string why =
        "lost for more than " +
        std::to_string(static_cast<int64_t>(config_.lost_worker_retention_seconds)) + " s";
    if (Status st = ForgetWorker(name, why); !st.ok())
      MOE_LOG(WARNING) << "worker " << name << " not forgotten yet: " << st;
  }
}

// What a worker's registration sets off for jobs (a rank that ended or was lost while it was away)
// is the attempt lifecycle's to record; a record the store refuses is retried from Tick, so the
// worker's stream does not fail for it.
StatusOr<moe::v1::Registered> Controller::Register(const moe::v1::Register& reg,
                                                   WorkerChannel* channel,
                                                   const WorkerIdentity& id) {
  MOE_RETURN_IF_ERROR(ValidateRegistration(reg));
  MOE_RETURN_IF_ERROR(CheckIdentity(reg, id));
  const std::vector<moe::v1::Register> devices = DeviceRegistrations(reg);
  MOE_ASSIGN_OR_RETURN(const std::string session, AdmitWorker(reg, devices, channel, id));
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  registrations_.Release(reg.name());
  // An earlier stream of these names (the node's agent restarted, or a half-open connection) is
  // closed: its messages are no longer this worker's.
  std::set<WorkerChannel*> replaced;
  for (const auto& d : devices) {
    const WorkerEntry* old = workers_.Find(d.name());
    if (old != nullptr && old->channel != nullptr && old->channel != channel)
      replaced.insert(old->channel);
  }
  for (const auto& d : devices) workers_.Register(d, channel, session);
  for (WorkerChannel* old : replaced) {
    if (!shutting_down_)  // (then streams end without Disconnected: the pointer may be stale)
      old->Close("superseded: " + reg.name() + " registered again on a newer stream");
  }
  data_roots_.Add(reg.device(), reg.data_roots());
  MOE_LOG(INFO) << "worker " << reg.name() << " registered: rack " << reg.rack() << ", node "
                << reg.node() << ", " << reg.device()
                << (devices.size() > 1 ? " and " + std::to_string(devices.size() - 1) + " more"
                                       : std::string())
                << (reg.running_size()
                        ? ", running " + std::to_string(reg.running_size()) + " rank(s)"
                        : "");
  // Ranks that ended while it was away, each on the device that ran it.
  for (const auto& f : reg.finished())
    attempts_.RankFinished(workers_.WorkerFor(reg.name(), f.job_id(), f.attempt(), f.rank()), f);
  for (const auto& d : devices) ReconcileRanks(d, *channel);
  // A pass is asked for, not run here: the tick runs one within 100 ms for a whole herd of
  // registrations (and only when something could be placed: QueueScheduler::MayPlace).
  if (scheduler_.MayPlace()) attempts_.NeedSchedule();
  moe::v1::Registered out;
  out.set_name(reg.name());
  out.set_lease_seconds(config_.lease_seconds);
  out.set_heartbeat_seconds(config_.heartbeat_seconds);
  out.set_session(session);
  out.set_epoch(epoch_);
  OfferCheckpointRoot(reg, &out);
  return out;
}

void Controller::OfferCheckpointRoot(const moe::v1::Register& reg, moe::v1::Registered* out) {
  if (!reg.uses_default_checkpoint_roots() || config_.checkpoint_root.empty()) return;
  out->set_checkpoint_root(config_.checkpoint_root);
  const std::string agent = AgentOfWorker(reg.name());
  for (const std::string& name : workers_.DevicesOf(agent))
    if (WorkerEntry* w = workers_.Find(name)) w->root_offered = true;
  // On this host the controller made it: counted at once (a submit right after the registration
  // needs no round trip), and taken back if the agent answers that it cannot use it (another user).
  if (!reg.host_id().empty() && reg.host_id() == host_id_)
    workers_.AddCheckpointRoot(agent, config_.checkpoint_root);
}

Status Controller::CheckpointRootMounted(const std::string& agent,
                                         const moe::v1::CheckpointRootMounted& m) {
  const std::vector<std::string>& devices = workers_.DevicesOf(agent);
  const WorkerEntry* first = devices.empty() ? nullptr : workers_.Find(devices.front());
  if (first == nullptr || !first->root_offered)
    return InvalidArgumentError("checkpoint root mounted: it was not offered to " + agent);
  if (m.ok()) {
    workers_.AddCheckpointRoot(agent, config_.checkpoint_root);
    MOE_LOG(INFO) << "worker " << agent << " has the checkpoint root " << m.root()
                  << " mounted: jobs that name no checkpoint directory may run there";
  } else {
    workers_.RemoveCheckpointRoot(agent, config_.checkpoint_root);
    MOE_LOG(WARNING) << "worker " << agent << " does not have the checkpoint root " << m.root()
                     << " (" << m.why().substr(0, kMaxMessageBytes)
                     << "): jobs that name no checkpoint directory will not run there";
  }
  return OkStatus();
}

// A registration's checks and, for a new session, its devices' stored records (one write), with
// mu_ alone: the write waits for its batch with the lock released, so a herd of registrations (a
// controller restart, a cluster coming up) shares commits. The agent's name is reserved until
// Register applies it.
StatusOr<std::string> Controller::AdmitWorker(const moe::v1::Register& reg,
                                              const std::vector<moe::v1::Register>& devices,
                                              WorkerChannel* channel, const WorkerIdentity& id) {
  MutexLock lock(&mu_);
  size_t fresh = 0;
  for (const auto& d : devices) fresh += workers_.Find(d.name()) == nullptr ? 1 : 0;
  MOE_RETURN_IF_ERROR(CheckWorkerQuotas(reg, fresh, id));
  if (!registrations_.Reserve(reg.name(), fresh)) {
    return UnavailableError("register: " + reg.name() +
                            " is registering on another stream; retry after " +
                            std::to_string(registrations_.ShortRetryMs()) + " ms");
  }
  StatusOr<std::string> session = workers_.Admit(reg, devices, channel, id.node);
  for (int i = 0; session.ok() && i < reg.finished_size(); ++i) {
    const auto& f = reg.finished(i);
    if (Status st = CheckRankOwner(jobs_, reg.name(), f.job_id(), f.attempt(), f.rank()); !st.ok())
      session = st;
  }
  // Stored before it is answered: after a restart only this session may come back as these names.
  std::vector<moe::v1::Worker> records;
  for (const auto& d : devices) {
    const WorkerEntry* known = workers_.Find(d.name());
    if (!session.ok() || (known != nullptr && known->session == *session)) continue;
    moe::v1::Worker& info = records.emplace_back();
    info.set_name(d.name());
    info.set_agent(reg.name());
    info.set_device_index(DeviceIndexOfWorker(d.name()));
    info.set_rack(d.rack());
    info.set_node(d.node());
    info.set_device(d.device());
    info.set_address(d.address());
    info.set_drained(known != nullptr && known->drained);
  }
  if (!records.empty()) {
    if (Status st = committer_.PutWorkers(records, *session); !st.ok()) session = st;
  }
  if (!session.ok()) registrations_.Release(reg.name());
  return session;
}

// The rendezvous keys the agent holding `session` may use: those of the attempts its devices run.
StatusOr<std::vector<std::string>> Controller::RendezvousScope(const std::string& session) {
  MutexLock lock(&mu_);
  const std::vector<const WorkerEntry*> devices = workers_.FindBySession(session);
  if (devices.empty()) {
    return UnauthenticatedError(
        "rendezvous needs the x-moe-session of a connected worker (from its registration)");
  }
  std::vector<std::string> prefixes;
  for (const WorkerEntry* w : devices) {
    if (w->busy()) prefixes.push_back(internal::RendezvousPrefix(w->job_id, w->attempt));
  }
  if (prefixes.empty()) {
    return PermissionDeniedError("worker " + devices.front()->agent +
                                 " runs no rank: no rendezvous keys");
  }
  return prefixes;
}

// One device of a (re)connecting agent (`reg` as DeviceRegistrations made it).
void Controller::ReconcileRanks(const moe::v1::Register& reg, WorkerChannel& channel) {
  for (const auto& r : reg.running()) {
    JobEntry* e = attempts_.AttemptOf(r.job_id(), r.attempt(), r.rank());
    const bool ours =
        e != nullptr && e->attempt->slots[static_cast<size_t>(r.rank())].worker == reg.name();
    if (ours && !e->attempt->ending) {
      workers_.Assign(reg.name(), r.job_id(), r.attempt(), r.rank());
      continue;
    }
    if (ours && e->job.state() == moe::v1::STOPPING) {  // busy until its rank ended
      workers_.Assign(reg.name(), r.job_id(), r.attempt(), r.rank());
      channel.Send(internal::CancelMessage(r.job_id(), r.attempt(), e->job.message()));
      continue;
    }
    channel.Send(internal::CancelMessage(r.job_id(), r.attempt(),
                                         "the controller does not know this attempt (any more)"));
    MOE_LOG(WARNING) << "worker " << reg.name() << " runs unknown rank " << r.rank() << " of "
                     << r.job_id() << " attempt " << r.attempt() << "; told it to stop";
  }
  const WorkerEntry* w = workers_.Find(reg.name());
  if (w == nullptr || !w->busy()) return;
  for (const auto& r : reg.running()) {
    if (r.job_id() == w->job_id && r.attempt() == w->attempt) return;
  }
  attempts_.RankLost(reg.name(),
                     "worker " + reg.name() + " came back without its rank (it restarted)");
}

// `agent`: the stream's node agent; a message about a rank is its device's (WorkerFor).
Status Controller::OnWorkerMessage(const std::string& agent, const moe::v1::WorkerMessage& msg) {
  if (msg.msg_case() == moe::v1::WorkerMessage::kStep ||
      msg.msg_case() == moe::v1::WorkerMessage::kSteps)
    return KeepStep(agent, msg);
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  DrainSteps();  // a rank's kept steps before its other news (its last step before its end)
  if (Status st = CheckWorkerMessage(jobs_, agent, msg, config_.checkpoint_root); !st.ok()) {
    MOE_LOG(WARNING) << "worker " << agent << ": refused: " << st;
    return st;
  }
  // Any message renews the lease. An agent whose lease ran out while its stream stayed up (a
  // partition that healed, a herd that kept its beats from being heard) is told to register
  // again: its heartbeats alone would never make it live again. Its news goes with the registration
  // (the ranks it runs, the outcomes not heard); a leaving agent's word is taken as it is.
  if (!workers_.Heartbeat(agent) && msg.msg_case() != moe::v1::WorkerMessage::kLeaving) {
    return UnavailableError("worker " + agent + " was declared lost (no heartbeat for " +
                            std::to_string(static_cast<int>(config_.lease_seconds)) +
                            " s, its lease expired): register again");
  }
  switch (msg.msg_case()) {
    case moe::v1::WorkerMessage::kFinished: {
      const auto& f = msg.finished();
      attempts_.RankFinished(workers_.WorkerFor(agent, f.job_id(), f.attempt(), f.rank()), f);
      // The freed worker (or a restart) may let a queued job go: one pass at the next tick (within
      // 100 ms) for a burst of rank ends, not one each.
      attempts_.NeedSchedule();
      break;
    }
    case moe::v1::WorkerMessage::kLogReply:
      logs_.Reply(agent, msg.log_reply());
      break;
    case moe::v1::WorkerMessage::kCheckpointRootMounted:
      return CheckpointRootMounted(agent, msg.checkpoint_root_mounted());
    case moe::v1::WorkerMessage::kLeaving:
      for (const std::string& device : std::vector<std::string>(workers_.DevicesOf(agent)))
        WorkerLeaving(device, msg.leaving().reason().substr(0, kMaxMessageBytes));
      break;
    case moe::v1::WorkerMessage::kStarted:
      attempts_.RankStarted(msg.started().job_id(), msg.started().attempt(), msg.started().rank());
      break;
    default:  // a heartbeat, a rank's start: renewing the lease is all they do
      break;
  }
  return OkStatus();
}

Status Controller::KeepStep(const std::string& agent, const moe::v1::WorkerMessage& msg) {
  MutexLock lock(&mu_);
  if (Status st = CheckWorkerMessage(jobs_, agent, msg, config_.checkpoint_root); !st.ok()) {
    MOE_LOG(WARNING) << "worker " << agent << ": refused: " << st;
    return st;
  }
  if (!workers_.Heartbeat(agent)) {
    return UnavailableError("worker " + agent + " was declared lost (no heartbeat for " +
                            std::to_string(static_cast<int>(config_.lease_seconds)) +
                            " s, its lease expired): register again");
  }
  // A flood is dropped, not kept; a job's last step always gets through (fast steps would otherwise
  // lose the report that says the job got to its end: fake_worker_test).
  std::vector<const moe::v1::StepReport*> reports;  // one, or a node's (WorkerMessage.steps)
  if (msg.has_step()) reports.push_back(&msg.step());
  for (const auto& s : msg.steps().reports()) reports.push_back(&s);
  for (const moe::v1::StepReport* s : reports) {
    if (!workers_.AllowStepReport(agent) && s->metrics().step() != s->metrics().total_steps())
      continue;
    moe::v1::StepReport& kept = pending_steps_[{s->job_id(), s->attempt(), s->rank()}];
    if (kept.job_id().empty() || s->metrics().step() >= kept.metrics().step()) kept = *s;  // newest
  }
  return OkStatus();
}

void Controller::DrainSteps() {
  if (pending_steps_.empty()) return;
  std::vector<moe::v1::StepReport> steps;
  steps.reserve(pending_steps_.size());
  for (auto& [key, report] : pending_steps_) steps.push_back(std::move(report));
  pending_steps_.clear();
  // In step order: an attempt takes no step below the newest it took, so rank 0's step N + 1 first
  // would drop rank 1's step N (and the job's metrics, which wait for every rank's step N).
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
    return a.metrics().step() < b.metrics().step();
  });
  // The lock is let go between slices: folding a tick's reports took 9 ms (p50) to 109 ms under
  // bench/load.py's submits, and every read and submit waited behind it. A change may release mu_
  // anyway (a write waits for its batch without it); op_mu_ stays held.
  constexpr size_t kSlice = 32;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0 && i % kSlice == 0) {
      mu_.Unlock();
      std::this_thread::yield();
      mu_.Lock();
    }
    attempts_.Step(steps[i]);
  }
}

void Controller::FoldSteps() {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  DrainSteps();
}

void Controller::SchedulePass() {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  scheduler_.Run();
}

void Controller::BeginShutdown() {
  MutexLock lock(&mu_);
  shutting_down_ = true;
  logs_.Fail("", 0, "the controller is shutting down");
}

void Controller::Disconnected(const std::string& agent, WorkerChannel* channel) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  DrainSteps();
  std::set<std::string> leaving;  // devices that said they were leaving, on this stream
  for (const std::string& name : workers_.DevicesOf(agent)) {
    const WorkerEntry* w = workers_.Find(name);
    if (w->leaving && w->channel == channel) leaving.insert(name);
  }
  for (const std::string& worker : workers_.Disconnected(agent, channel)) {
    logs_.Fail(worker, 0, "worker " + worker + " disconnected");
    if (leaving.count(worker) == 0) {
      attempts_.WorkerLost(worker, "its stream closed");
      continue;
    }
    // It said it was leaving: gone on purpose, not lost (no MoEWorkerLost, its name free again).
    if (Status st = ForgetWorker(worker, "left cleanly"); !st.ok()) {
      MOE_LOG(WARNING) << "worker " << worker << " left but stays listed as lost: " << st;
    }
  }
}

void Controller::WorkerLeaving(const std::string& name, const std::string& reason) {
  WorkerEntry* w = workers_.Find(name);
  if (w == nullptr || w->leaving) return;
  workers_.SetLeaving(name);
  MOE_LOG(INFO) << "worker " << name << " is leaving (" << reason << ")"
                << (w->busy() ? "; requeueing " + w->job_id : "");
  if (!w->busy()) return;
  JobEntry* e = attempts_.AttemptOf(w->job_id, w->attempt, w->rank);
  if (e == nullptr || IsTerminal(e->job.state())) return;
  attempts_.Stop(*e,
                 "worker " + name + " (rank " + std::to_string(w->rank) + ") is leaving: " + reason,
                 StopCause::kRequeue);
}

void Controller::Tick() {
  {
    // The writer's figures first, with mu_ alone: a change under way may hold op_mu_ for a while.
    MutexLock lock(&mu_);
    metrics_.SetStore(committer_.batches(), committer_.writes(), leases_.stalled_seconds());
    metrics_.SetRegistrationGate(registrations_.refused(), registrations_.Backlog());
  }
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  if (shutting_down_ || !fenced_.empty()) return;
  leases_
      .NoteTick();  // first: a tick late because the controller stalled gives the leases that time
  if (const double now = clock_.Monotonic(); now - epoch_checked_ >= 5) {
    epoch_checked_ = now;
    auto stored = store_.StoredEpoch();
    if (stored.ok() && *stored > epoch_) {
      fenced_ = "another moe-controller took over this state (stored fencing epoch " +
                std::to_string(*stored) + " > this one's " + std::to_string(epoch_) + ")";
      MOE_LOG(ERROR) << fenced_ << "; stopping";
      return;
    }
  }
  DrainSteps();                // the step reports kept since the last tick
  if (shutting_down_) return;  // the drain lets mu_ go between slices: a shutdown may have begun
  for (const auto& name : workers_.ExpireLeases()) {
    attempts_.WorkerLost(name, "no heartbeat for " +
                                   std::to_string(static_cast<int>(config_.lease_seconds)) +
                                   " s (lease expired)");
  }
  const double now = clock_.Monotonic();
  for (JobEntry* e : jobs_.All()) {
    attempts_.CheckDeadlines(*e, now);
    attempts_.SettleOrRetry(*e);  // records the store refused earlier
    if (e->not_before != 0 && now >= e->not_before)
      e->not_before = 0, attempts_.NeedSchedule();  // backoff over
  }
  logs_.Fail("", now, "no answer within 10 s");
  rendezvous_.Expire(now);
  ExpireFinishedJobs();
  scheduler_.Run();
  // Once a second (a scrape's resolution; a lost worker's retention is minutes): walking 131,072
  // devices every tick would cost the tick. Where one walk takes longer than 10 ms (tens of
  // thousands of devices) the next waits 100 times as long (at most 15 s, a scrape interval), so
  // that these walks never take more than 1 % of the controller's time.
  if (now - cluster_metrics_at_ >= cluster_metrics_every_ || now < cluster_metrics_at_) {
    cluster_metrics_at_ = now;
    const auto t0 = std::chrono::steady_clock::now();
    PruneLostWorkers();
    data_roots_.Refresh(workers_);
    PublishClusterMetrics();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cluster_metrics_every_ = std::clamp(100 * took, 1.0, 15.0);
  }
}

void Controller::PublishClusterMetrics() {
  const double now = clock_.Now();
  std::vector<MetricsAggregator::WaitingJob> waiting;
  for (JobEntry* e : jobs_.All()) {  // the live jobs' waits move with the clock
    if (IsTerminal(e->job.state())) continue;
    metrics_.SetGoodput(e->job.id(), GoodputAt(e->job, now));
    metrics_.SetCheckpoint(e->job, now);
    if (IsQueued(e->job.state())) waiting.push_back({e->job.id(), WaitClassName(e->wait_class)});
  }
  metrics_.SetWaiting(waiting, now);
  metrics_.SetQueueLength(jobs_.CountQueued());
  metrics_.SetQueues(scheduler_.Queues());
  metrics_.SetRendezvousKeys(rendezvous_.size());
  metrics_.SetWorkerCounts(workers_.CountByStateAndRack());
  if (config_.spares_per_rack > 0)
    metrics_.SetRackSpares(workers_.CountByRack(config_.spares_per_rack));
  metrics_.Expire();
}

void Controller::RequestLogs(const moe::v1::GetLogsRequest& req, LogsDone done) {
  MutexLock lock(&mu_);
  logs_.Request(req, std::move(done));
}

std::vector<moe::v1::QueueStatus> Controller::Queues() {
  MutexLock lock(&mu_);
  return scheduler_.Queues();
}

std::string Controller::Fenced() {
  MutexLock lock(&mu_);
  return fenced_;
}

Status Controller::StepDown(const std::string& actor) {
  if (!step_down_) {
    return FailedPreconditionError(
        "this controller has no standby to hand over to: it runs on the embedded SQLite store "
        "(moe-controller --store etcd://HOST:PORT runs a leader with standbys)");
  }
  MOE_LOG(WARNING) << "stepping down at the request of " << (actor.empty() ? "an admin" : actor)
                   << ": a standby takes over";
  return step_down_();
}

}  // namespace moe::controller
