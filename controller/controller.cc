// The Controller's entry points: recovery, JobService, WorkerService and Tick. What happens to an
// attempt between its placement and its end is in attempt_lifecycle.cc.
#include "controller/controller.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "common/file_util.h"
#include "common/job_spec_proto.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "common/memory_model.h"
#include "controller/controller_internal.h"
#include "controller/worker_claims.h"

namespace moe::controller {

using moe::v1::JobState;

Controller::Controller(StateStore& store, Clock& clock, MetricsAggregator& metrics,
                       const ControllerConfig& config)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      config_(config),
      queues_(config.queues),
      jobs_(store, clock),
      workers_(clock, config.lease_seconds) {
  jobs_.AddListener(&metrics_);
  jobs_.AddListener(&watchers_);
}

Status Controller::Recover() {
  MutexLock lock(&mu_);
  MOE_RETURN_IF_ERROR(jobs_.Load());
  MOE_RETURN_IF_ERROR(RestoreWorkers());
  int running = 0;
  for (JobEntry* e : jobs_.All()) {
    if (e->job.state() != moe::v1::SCHEDULED && e->job.state() != moe::v1::RUNNING) continue;
    MOE_RETURN_IF_ERROR(AwaitReconnect(*e));
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
  return OkStatus();
}

// A job that was running when the controller stopped: its ranks may still run, and get a grace
// period to report back on their reconnecting workers (CheckReconnect).
Status Controller::AwaitReconnect(JobEntry& e) {
  const int grace = static_cast<int>(config_.reconnect_grace_seconds);
  MOE_RETURN_IF_ERROR(
      jobs_.Event(e, "ControllerRestarted",
                  "waiting up to " + std::to_string(grace) + " s for its ranks to report back"));
  e.attempt = std::make_unique<Attempt>();
  e.attempt->number = e.job.attempt();
  e.attempt->slots = internal::SlotsOf(e.job);
  RankStatus running;
  running.started = true;  // it ran before the restart; CheckReconnect watches it now
  e.attempt->ranks.assign(e.attempt->slots.size(), running);
  e.attempt->reconnect_deadline = clock_.Monotonic() + config_.reconnect_grace_seconds;
  // Its workers stay busy with it: one that reconnects is given no new work until it has reported
  // the rank (or come back without it: the rank is lost) or the grace has passed.
  for (size_t r = 0; r < e.attempt->slots.size(); ++r) {
    workers_.Assign(e.attempt->slots[r].worker, e.job.id(), e.attempt->number, static_cast<int>(r));
  }
  return OkStatus();
}

StatusOr<moe::v1::Job> Controller::Submit(const moe::v1::TrainingJob& submitted,
                                          const std::string& request_id, const std::string& actor) {
  if (request_id.size() > kMaxRequestIdBytes) {
    return InvalidArgumentError("request_id: at most " + std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  if (const size_t bytes = submitted.ByteSizeLong(); bytes > kMaxJobDocumentBytes) {
    return InvalidArgumentError("job: the document is " + std::to_string(bytes) + " bytes; at most " +
                                std::to_string(kMaxJobDocumentBytes) +
                                " (a path or name that long is a mistake)");
  }
  MOE_ASSIGN_OR_RETURN(JobSpec spec, SpecFromProto(submitted));
  MOE_RETURN_IF_ERROR(ApplyPriorityClass(&spec));
  MutexLock lock(&mu_);
  if (!request_id.empty()) {
    for (JobEntry* e : jobs_.All()) {
      if (e->job.request_id() == request_id) return e->job;  // a retry: the job it created
    }
  }
  // A job larger than the cluster registered now waits for capacity (a controller started before its
  // workers, a cluster growing): only a job over the configured ceiling is refused.
  if (config_.max_job_ranks > 0 && spec.parallelism.world_size > config_.max_job_ranks) {
    return FailedPreconditionError("the job can never fit: spec.parallelism.world_size " + std::to_string(spec.parallelism.world_size) +
                                   " exceeds this controller's ceiling of " + std::to_string(config_.max_job_ranks) +
                                   " ranks per job (--max-job-ranks)");
  }
  MOE_RETURN_IF_ERROR(CheckMemoryFits(spec));
  MOE_ASSIGN_OR_RETURN(spec.queue, queues_.Resolve(spec.queue));
  MOE_RETURN_IF_ERROR(queues_.CheckCanEverFit(spec.queue, spec.resources.device, spec.parallelism.world_size));
  const std::string id = jobs_.NewId(spec.name);
  if (spec.checkpoint.dir.empty() && !config_.checkpoint_root.empty()) {
    spec.checkpoint.dir = JoinPath(config_.checkpoint_root, id);
  }
  MOE_RETURN_IF_ERROR(CheckCheckpointDirFree(spec.checkpoint.dir));
  MOE_RETURN_IF_ERROR(CheckPathsAllowed(spec));
  MOE_ASSIGN_OR_RETURN(JobEntry * e, jobs_.Create(id, SpecToProto(spec), spec, request_id, actor));
  schedule_needed_ = true;
  Schedule();
  return e->job;
}

// metadata.priority_class: the class's priority replaces metadata.priority.
Status Controller::ApplyPriorityClass(JobSpec* spec) const {
  if (spec->priority_class.empty()) return OkStatus();
  const auto it = config_.priority_classes.find(spec->priority_class);
  if (it == config_.priority_classes.end()) {
    std::string known;
    for (const auto& [name, pc] : config_.priority_classes) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgumentError("metadata.priority_class: unknown class '" + spec->priority_class + "' (" +
                                (known.empty() ? "this controller defines none" : "known: " + known) +
                                "; moe-controller --priority-class)");
  }
  spec->priority = it->second.priority;
  return OkStatus();
}

bool Controller::Preemptible(const JobSpec& spec) const {
  const auto it = config_.priority_classes.find(spec.priority_class);
  return it == config_.priority_classes.end() || it->second.preemptible;
}

Status Controller::CheckMemoryFits(const JobSpec& spec) const {
  // The largest memory a live worker of the job's device type reports; none reported: nothing to check.
  int64_t most = 0;
  std::string where;
  for (const moe::v1::Worker& w : workers_.List()) {
    const bool kind = spec.resources.device == "cpu" ? w.device() == "cpu" : w.device().rfind("cuda", 0) == 0;
    if (!kind || w.state() == moe::v1::LOST || w.memory_bytes() <= most) continue;
    most = w.memory_bytes(), where = w.name();
  }
  if (most == 0) return OkStatus();
  auto plan = EstimateMemory(spec, spec.resources.device == "cpu" ? 4 : 2);
  if (!plan.ok()) return plan.status();
  const StageMemory& big = plan->largest();
  if (big.peak() <= static_cast<double>(most)) return OkStatus();
  size_t top = 0;
  for (size_t k = 1; k < kNumMemoryKinds; ++k) top = big.bytes[k] > big.bytes[top] ? k : top;
  char msg[512];
  std::snprintf(msg, sizeof(msg),
                "the job can never fit: pipeline rank %lld needs %.2f GB per rank (%s %.2f GB, the largest part; "
                "moe-train --describe shows all), more than the %.2f GB of the roomiest %s worker (%s)",
                static_cast<long long>(big.pp_rank), big.peak() / 1e9,
                std::string(MemoryKindName(static_cast<MemoryKind>(top))).c_str(), big.bytes[top] / 1e9,
                static_cast<double>(most) / 1e9, spec.resources.device.c_str(), where.c_str());
  return FailedPreconditionError(msg);
}

// Lexically (the controller does not see the workers' files; each worker checks again, following its
// symbolic links): refused when every live worker of the job's device type confines that kind of path
// and none allows it. Workers without roots allow anything.
Status Controller::CheckPathsAllowed(const JobSpec& spec) const {
  using Roots = google::protobuf::RepeatedPtrField<std::string>;
  const auto check = [&](const std::string& field, const std::string& path, const std::string& what,
                         const std::function<const Roots&(const moe::v1::Worker&)>& roots_of) -> Status {
    Status refusal = OkStatus();
    for (const moe::v1::Worker& w : workers_.List()) {
      const bool kind = spec.resources.device == "cpu" ? w.device() == "cpu" : w.device().rfind("cuda", 0) == 0;
      if (!kind || w.state() == moe::v1::LOST || w.state() == moe::v1::LEAVING) continue;
      Status st = CheckUnderRoots(field, path, {roots_of(w).begin(), roots_of(w).end()}, what, false, "/");
      if (st.ok()) return OkStatus();
      refusal = FailedPreconditionError(st.message() + " (worker " + w.name() + "; no live " + spec.resources.device +
                                        " worker allows it)");
    }
    return refusal;
  };
  if (spec.data.source != "synthetic" && !spec.data.path.empty() && spec.data.path[0] == '/') {
    MOE_RETURN_IF_ERROR(check("spec.data.path", spec.data.path, "data", [](const moe::v1::Worker& w) -> const Roots& { return w.data_roots(); }));
  }
  if (spec.checkpoint.dir.empty() || spec.checkpoint.dir[0] != '/') return OkStatus();
  return check("spec.checkpoint.dir", spec.checkpoint.dir, "checkpoint",
               [](const moe::v1::Worker& w) -> const Roots& { return w.checkpoint_roots(); });
}

Status Controller::CheckCheckpointDirFree(const std::string& dir) {
  if (dir.empty()) return OkStatus();
  const std::string want = NormalizePath(dir);
  for (JobEntry* e : jobs_.All()) {
    if (IsTerminal(e->job.state()) || NormalizePath(e->spec.checkpoint.dir) != want) continue;
    return FailedPreconditionError("spec.checkpoint.dir: " + dir + " is the checkpoint directory of live job " +
                                   e->job.id() + "; two jobs would overwrite each other's checkpoints");
  }
  return OkStatus();
}

StatusOr<moe::v1::Job> Controller::Get(const std::string& id, bool with_events) {
  MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  moe::v1::Job out = e->job;
  if (IsQueued(out.state()) && !e->attempt) out.set_waiting_reason(e->waiting_reason);
  if (with_events) {
    MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> events, jobs_.Events(id));
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

StatusOr<moe::v1::Job> Controller::Cancel(const std::string& id, const std::string& actor, bool now) {
  MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  if (IsTerminal(e->job.state())) {
    return FailedPreconditionError("job " + id + " already ended (" +
                                   moe::v1::JobState_Name(e->job.state()) + ")");
  }
  // Stored before any rank hears of it: a refused cancel leaves the job running.
  const std::string by = "cancelled by " + (actor.empty() ? std::string("a user") : actor) +
                         (!e->attempt ? "" : now ? " (--now: ranks killed, no checkpoint)" : " (ranks checkpoint at their next step and stop)");
  MOE_RETURN_IF_ERROR(jobs_.Transition(*e, moe::v1::CANCELLED, "Cancelled", by));
  if (e->attempt) {
    StopRanks(*e, by, now);
    SettleOrRetry(*e);  // ends the attempt at once when no rank was left to stop
  }
  schedule_needed_ = true;
  return e->job;
}

StatusOr<int64_t> Controller::Watch(const std::string& id, WatchFn fn) {
  MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> past, jobs_.Events(id));
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

StatusOr<moe::v1::Worker> Controller::SetDrained(const std::string& name, bool drained, const std::string& actor,
                                                 bool move_work) {
  MutexLock lock(&mu_);
  WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return NotFoundError("no worker named '" + name + "'");
  moe::v1::Worker record = w->info;  // stored first: a refused write leaves the worker as it was
  record.set_drained(drained);
  MOE_RETURN_IF_ERROR(store_.PutWorker(record, w->session));
  MOE_RETURN_IF_ERROR(workers_.SetDrained(name, drained));
  MOE_LOG(INFO) << "worker " << name << (drained ? " drained" : " undrained") << (actor.empty() ? "" : " by " + actor);
  if (drained && move_work && w->busy()) {
    JobEntry* e = AttemptOf(w->job_id, w->attempt, w->rank);
    if (e != nullptr && !IsTerminal(e->job.state())) {
      FailAttempt(*e, "worker " + name + " (rank " + std::to_string(w->rank) + ") drained" + (actor.empty() ? "" : " by " + actor),
                  /*permanent=*/false, /*counted=*/false);
    }
  }
  schedule_needed_ = true;
  return workers_.Describe(*workers_.Find(name));
}

Status Controller::DeleteWorker(const std::string& name, const std::string& actor) {
  MutexLock lock(&mu_);
  const WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return NotFoundError("no worker named '" + name + "'");
  if (w->channel != nullptr) {
    return FailedPreconditionError("worker " + name + " is connected; stop its moe-worker instead (SIGTERM: its rank "
                                   "checkpoints, the job moves on, and the worker is removed). delete is for lost workers");
  }
  return ForgetWorker(name, "deleted" + (actor.empty() ? std::string() : " by " + actor));
}

Status Controller::ForgetWorker(const std::string& name, const std::string& why) {
  MOE_RETURN_IF_ERROR(store_.DeleteWorker(name));  // stored first: a refused write keeps the worker
  if (const WorkerEntry* w = workers_.Find(name); w != nullptr && w->busy()) RankLost(name, "worker " + name + " " + why);
  workers_.Remove(name);
  MOE_LOG(INFO) << "worker " << name << " removed: " << why;
  schedule_needed_ = true;
  return OkStatus();
}

void Controller::PruneLostWorkers() {
  if (config_.lost_worker_retention_seconds <= 0) return;
  for (const auto& name : workers_.LostLongerThan(config_.lost_worker_retention_seconds)) {
    const std::string why = "lost for more than " + std::to_string(static_cast<int64_t>(config_.lost_worker_retention_seconds)) + " s";
    if (Status st = ForgetWorker(name, why); !st.ok()) MOE_LOG(WARNING) << "worker " << name << " not forgotten yet: " << st;
  }
}

// What a worker's registration sets off for jobs (a rank that ended or was lost while it was away)
// is the attempt lifecycle's to record; a record the store refuses is retried from Tick, so the
// worker's stream does not fail for it.
StatusOr<moe::v1::Registered> Controller::Register(const moe::v1::Register& reg,
                                                   WorkerChannel* channel) {
  MutexLock lock(&mu_);
  MOE_ASSIGN_OR_RETURN(const std::string session, workers_.Admit(reg, channel));
  for (const auto& f : reg.finished()) {
    MOE_RETURN_IF_ERROR(CheckRankOwner(reg.name(), f.job_id(), f.attempt(), f.rank()));
  }
  const WorkerEntry* known = workers_.Find(reg.name());
  if (known == nullptr || known->session != session) {
    // Stored before it is answered: after a restart only this session may come back as this name.
    moe::v1::Worker info;
    info.set_name(reg.name());
    info.set_rack(reg.rack());
    info.set_node(reg.node());
    info.set_device(reg.device());
    info.set_address(reg.address());
    info.set_drained(known != nullptr && known->drained);
    MOE_RETURN_IF_ERROR(store_.PutWorker(info, session));
  }
  MOE_ASSIGN_OR_RETURN(WorkerEntry * w, workers_.Register(reg, channel, session));
  MOE_LOG(INFO) << "worker " << reg.name() << " registered: rack " << reg.rack() << ", node "
                << reg.node() << ", " << reg.device()
                << (reg.running_size()
                        ? ", running " + std::to_string(reg.running_size()) + " rank(s)"
                        : "");
  // Ranks that ended while it was away.
  for (const auto& f : reg.finished()) HandleFinished(reg.name(), f);
  BindRunningRanks(reg, *channel);
  ForgetUnreportedRank(reg, *w);
  schedule_needed_ = true;
  Schedule();
  moe::v1::Registered out;
  out.set_name(reg.name());
  out.set_lease_seconds(config_.lease_seconds);
  out.set_heartbeat_seconds(config_.heartbeat_seconds);
  out.set_session(session);
  return out;
}

Status Controller::CheckRankOwner(const std::string& worker, const std::string& job_id, int attempt,
                                  int rank) {
  JobEntry* e = jobs_.Find(job_id);
  if (e == nullptr || !e->attempt || e->attempt->number != attempt) return OkStatus();
  const auto& slots = e->attempt->slots;
  if (rank < 0 || rank >= static_cast<int>(slots.size()) ||
      slots[static_cast<size_t>(rank)].worker != worker) {
    return PermissionDeniedError("worker " + worker + " does not run rank " + std::to_string(rank) +
                                 " of " + job_id + " attempt " + std::to_string(attempt));
  }
  return OkStatus();
}

Status Controller::CheckWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg) {
  switch (msg.msg_case()) {
    case moe::v1::WorkerMessage::kStep: {
      const auto& s = msg.step();
      MOE_RETURN_IF_ERROR(CheckRankOwner(worker, s.job_id(), s.attempt(), s.rank()));
      const JobEntry* e = jobs_.Find(s.job_id());
      if (e == nullptr) return OkStatus();
      const auto& m = e->spec.model;
      return ValidateStepReport(s, static_cast<int>(m.num_layers + m.mtp_depth),
                                static_cast<int>(e->spec.parallelism.world_size));
    }
    case moe::v1::WorkerMessage::kStarted:
      return CheckRankOwner(worker, msg.started().job_id(), msg.started().attempt(),
                            msg.started().rank());
    case moe::v1::WorkerMessage::kFinished: {
      const auto& f = msg.finished();
      if (f.message().size() > kMaxMessageBytes) {
        return InvalidArgumentError("rank finished: message over 4096 bytes");
      }
      return CheckRankOwner(worker, f.job_id(), f.attempt(), f.rank());
    }
    case moe::v1::WorkerMessage::kRegister:
      return InvalidArgumentError("register: only the stream's first message registers");
    case moe::v1::WorkerMessage::kLogReply:  // what it asked for is at most 1 MiB (worker/rank_log.h)
      if (msg.log_reply().text().size() > (size_t{2} << 20)) return InvalidArgumentError("log reply: text over 2 MiB");
      return OkStatus();
    default:
      return OkStatus();
  }
}

StatusOr<std::string> Controller::RendezvousScope(const std::string& session) {
  MutexLock lock(&mu_);
  const WorkerEntry* w = workers_.FindBySession(session);
  if (w == nullptr) {
    return UnauthenticatedError(
        "rendezvous needs the x-moe-session of a connected worker (from its registration)");
  }
  if (!w->busy()) {
    return PermissionDeniedError("worker " + w->info.name() + " runs no rank: no rendezvous keys");
  }
  return internal::RendezvousPrefix(w->job_id, w->attempt);
}

// What the worker says it runs: bound to the attempt we know, or told to stop.
void Controller::BindRunningRanks(const moe::v1::Register& reg, WorkerChannel& channel) {
  for (const auto& r : reg.running()) {
    JobEntry* e = AttemptOf(r.job_id(), r.attempt(), r.rank());
    if (e != nullptr && e->attempt->slots[static_cast<size_t>(r.rank())].worker == reg.name() &&
        !e->attempt->ending) {
      workers_.Assign(reg.name(), r.job_id(), r.attempt(), r.rank());
      continue;
    }
    channel.Send(internal::CancelMessage(r.job_id(), r.attempt(),
                                         "the controller does not know this attempt (any more)"));
    MOE_LOG(WARNING) << "worker " << reg.name() << " runs unknown rank " << r.rank() << " of "
                     << r.job_id() << " attempt " << r.attempt() << "; told it to stop";
  }
}

// A reconnecting worker that was assigned a rank but does not report it lost it (it restarted).
void Controller::ForgetUnreportedRank(const moe::v1::Register& reg, const WorkerEntry& w) {
  if (!w.busy()) return;
  for (const auto& r : reg.running()) {
    if (r.job_id() == w.job_id && r.attempt() == w.attempt) return;
  }
  RankLost(reg.name(), "worker " + reg.name() + " came back without its rank (it restarted)");
}

Status Controller::OnWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg) {
  MutexLock lock(&mu_);
  if (Status st = CheckWorkerMessage(worker, msg); !st.ok()) {
    MOE_LOG(WARNING) << "worker " << worker << ": refused: " << st;
    return st;
  }
  workers_.Heartbeat(worker);  // any message renews the lease
  switch (msg.msg_case()) {
    case moe::v1::WorkerMessage::kStep:
      // A flood is dropped, not kept; a job's last step always gets through (fast steps would
      // otherwise lose the report that says the job got to its end: fake_worker_test).
      if (workers_.AllowStepReport(worker) ||
          msg.step().metrics().step() == msg.step().metrics().total_steps()) {
        HandleStep(msg.step());
      }
      break;
    case moe::v1::WorkerMessage::kFinished:
      HandleFinished(worker, msg.finished());
      break;
    case moe::v1::WorkerMessage::kLogReply:
      HandleLogReply(worker, msg.log_reply());
      break;
    case moe::v1::WorkerMessage::kLeaving:
      WorkerLeaving(worker, msg.leaving().reason().substr(0, kMaxMessageBytes));
      break;
    case moe::v1::WorkerMessage::kStarted:
      if (JobEntry* e = AttemptOf(msg.started().job_id(), msg.started().attempt(), msg.started().rank())) {
        e->attempt->ranks[static_cast<size_t>(msg.started().rank())].started = true;
      }
      break;
    default:  // a heartbeat, a rank's start: renewing the lease is all they do
      break;
  }
  return OkStatus();
}

void Controller::HandleStep(const moe::v1::StepReport& s) {
  JobEntry* e = AttemptOf(s.job_id(), s.attempt(), s.rank());
  if (e == nullptr || e->attempt->ending) return;
  e->attempt->ranks[static_cast<size_t>(s.rank())].started = true;
  if (!StepFiguresPlausible(s.metrics())) {
    MOE_LOG(WARNING) << "job " << e->job.id() << ": step " << s.metrics().step() << " of rank " << s.rank()
                     << " dropped: implausible figures (non-finite or negative times, MFU above 1.5)";
    return;
  }
  if (e->job.state() == moe::v1::SCHEDULED) {
    const std::string what = "attempt " + std::to_string(e->attempt->number) + " is training";
    if (Status st = jobs_.Transition(*e, moe::v1::RUNNING, "Running", what); !st.ok()) {
      MOE_LOG(WARNING) << "job " << e->job.id() << " stays SCHEDULED: " << st
                       << " (the next step report retries)";
    }
  }
  std::vector<StragglerChange> changes;
  auto job_metrics = metrics_.OnStep(s.job_id(), s.attempt(), s.rank(), s.metrics(), &changes);
  for (const auto& c : changes) RecordStraggler(*e, c);
  if (!job_metrics) return;
  if (Status st = jobs_.PublishMetrics(*e, *job_metrics); !st.ok()) {
    MOE_LOG(WARNING) << "job " << e->job.id() << ": metrics of step " << job_metrics->step()
                     << " not stored: " << st << " (the next step's metrics replace them)";
  }
}

void Controller::RecordStraggler(JobEntry& e, const StragglerChange& c) {
  const Slot& slot = e.attempt->slots[static_cast<size_t>(c.rank)];
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.2f", c.ratio);
  const std::string what = "rank " + std::to_string(c.rank) + " on " + slot.worker + " (rack " +
                           slot.rack + ", node " + slot.node + "): compute time " + ratio +
                           "x the job's median";
  if (Status st = jobs_.Event(e, c.flagged ? "Straggler" : "StragglerRecovered", what); !st.ok()) {
    // The flag itself is in every step's metrics and on /metrics (moe_job_straggler); only the
    // history misses this line.
    MOE_LOG(WARNING) << "job " << e.job.id() << ": straggler event not stored: " << st << " ("
                     << what << ")";
  }
}

void Controller::BeginShutdown() {
  MutexLock lock(&mu_);
  shutting_down_ = true;
  FailLogRequests("", 0, "the controller is shutting down");
}

void Controller::Disconnected(const std::string& worker, WorkerChannel* channel) {
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  const WorkerEntry* w = workers_.Find(worker);
  const bool leaving = w != nullptr && w->leaving && w->channel == channel;
  if (!workers_.Disconnected(worker, channel)) return;
  FailLogRequests(worker, 0, "worker " + worker + " disconnected");
  if (!leaving) return WorkerLost(worker, "its stream closed");
  // It said it was leaving: gone on purpose, not lost (no MoEWorkerLost, its name free again).
  if (Status st = ForgetWorker(worker, "left cleanly"); !st.ok()) {
    MOE_LOG(WARNING) << "worker " << worker << " left but stays listed as lost: " << st;
  }
}

void Controller::WorkerLeaving(const std::string& name, const std::string& reason) {
  WorkerEntry* w = workers_.Find(name);
  if (w == nullptr || w->leaving) return;
  workers_.SetLeaving(name);
  MOE_LOG(INFO) << "worker " << name << " is leaving (" << reason << ")" << (w->busy() ? "; requeueing " + w->job_id : "");
  if (!w->busy()) return;
  JobEntry* e = AttemptOf(w->job_id, w->attempt, w->rank);
  if (e == nullptr) return;
  if (IsTerminal(e->job.state())) return;
  FailAttempt(*e, "worker " + name + " (rank " + std::to_string(w->rank) + ") is leaving: " + reason,
              /*permanent=*/false, /*counted=*/false);
}

void Controller::Tick() {
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  ExpireLeases();
  const double now = clock_.Monotonic();
  for (JobEntry* e : jobs_.All()) {
    if (e->attempt && e->attempt->reconnect_deadline != 0) CheckReconnect(*e, now);
  }
  for (JobEntry* e : jobs_.All()) SettleOrRetry(*e);  // records the store refused earlier
  for (JobEntry* e : jobs_.All()) {
    if (e->attempt && e->attempt->start_deadline != 0) CheckRankStarts(*e, now);
  }
  for (JobEntry* e : jobs_.All()) {
    if (e->not_before != 0 && now >= e->not_before) e->not_before = 0, schedule_needed_ = true;  // backoff over
  }
  FailLogRequests("", now, "no answer within 10 s");
  rendezvous_.Expire(now);
  ExpireFinishedJobs();
  PruneLostWorkers();
  Schedule();
  PublishClusterMetrics();
}

void Controller::ExpireLeases() {
  for (const auto& name : workers_.ExpireLeases()) {
    WorkerLost(name, "no heartbeat for " + std::to_string(static_cast<int>(config_.lease_seconds)) +
                         " s (lease expired)");
  }
}

// After a controller restart: an attempt carries on once all its ranks reported back, and fails
// when some did not by the deadline.
void Controller::CheckReconnect(JobEntry& e, double now) {
  Attempt& a = *e.attempt;
  std::vector<int> missing;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const WorkerEntry* w = workers_.Find(a.slots[r].worker);
    const bool back = w != nullptr && !w->lost && w->job_id == e.job.id() && w->attempt == a.number;
    if (!back && !a.ranks[r].finished) missing.push_back(static_cast<int>(r));
  }
  if (missing.empty()) {
    const std::string what = "all " + std::to_string(a.ranks.size()) +
                             " ranks reported back; attempt " + std::to_string(a.number) +
                             " carries on";
    if (Status st = jobs_.Event(e, "Reconnected", what); !st.ok()) {
      MOE_LOG(WARNING) << "job " << e.job.id() << ": " << st << " (the next tick records it again)";
      return;
    }
    a.reconnect_deadline = 0;
  } else if (now > a.reconnect_deadline) {
    a.reconnect_deadline = 0;
    for (int r : missing) a.ranks[static_cast<size_t>(r)].finished = true;
    const size_t first = static_cast<size_t>(missing.front());
    FailAttempt(e, std::to_string(missing.size()) +
                       " rank(s) did not report back after the controller restarted (rank " +
                       std::to_string(missing.front()) + " on " + a.slots[first].worker + ")");
  }
}

void Controller::PublishClusterMetrics() {
  metrics_.SetQueueLength(jobs_.CountQueued());
  metrics_.SetRendezvousKeys(rendezvous_.size());
  metrics_.SetWorkers(workers_.List());
  metrics_.Expire();
}

size_t Controller::QueueLength() {
  MutexLock lock(&mu_);
  return jobs_.CountQueued();
}

}  // namespace moe::controller
