#include "controller/controller.h"

#include <chrono>

#include "common/file_util.h"
#include "common/job_spec_proto.h"
#include "common/log.h"

namespace moe::controller {

using moe::v1::JobState;

Controller::Controller(StateStore& store, Clock& clock, MetricsAggregator& metrics, const ControllerOptions& options)
    : store_(store), clock_(clock), metrics_(metrics), options_(options), jobs_(store, clock),
      workers_(clock, options.lease_seconds) {}

Status Controller::Recover() {
  absl::MutexLock lock(&mu_);
  MOE_RETURN_IF_ERROR(jobs_.Load());
  int running = 0, queued = 0;
  for (JobEntry* e : jobs_.All()) {
    metrics_.OnJobState(e->job.id(), e->job.state());
    const JobState s = e->job.state();
    if (s == moe::v1::SCHEDULED || s == moe::v1::RUNNING) {
      // Its ranks may still run: they get a grace period to report back on their reconnecting workers.
      e->attempt = std::make_unique<Attempt>();
      e->attempt->number = e->job.attempt();
      for (const auto& p : e->job.placement()) {
        e->attempt->slots.push_back({p.worker(), p.rack(), p.node(), p.device()});
        RankStatus rs;
        rs.worker = p.worker();
        rs.started = s == moe::v1::RUNNING;
        e->attempt->ranks.push_back(rs);
      }
      e->attempt->reconnect_deadline = clock_.Monotonic() + options_.reconnect_grace_seconds;
      std::vector<RankInfo> info;
      for (const auto& sl : e->attempt->slots) info.push_back({sl.rack, sl.worker});
      metrics_.StartAttempt(e->job.id(), e->attempt->number, info, e->spec.parallelism.world_size);
      // Mark the workers busy in advance: nothing else is placed on them meanwhile.
      jobs_.Event(*e, "ControllerRestarted", "waiting up to " + std::to_string(static_cast<int>(options_.reconnect_grace_seconds)) +
                                                 " s for its ranks to report back");
      ++running;
    } else if (s == moe::v1::PENDING || s == moe::v1::RESTARTING) {
      ++queued;
    }
  }
  MOE_LOG(INFO) << "recovered " << jobs_.All().size() << " jobs (" << running << " running, " << queued << " queued)";
  return OkStatus();
}

StatusOr<moe::v1::Job> Controller::Submit(const moe::v1::TrainingJob& submitted) {
  MOE_ASSIGN_OR_RETURN(JobSpec spec, SpecFromProto(submitted));
  if (spec.model.attention.type != "mha") {
    return InvalidArgumentError("spec.model.attention.type: the engine trains mha; '" + spec.model.attention.type +
                                "' is for FLOPs accounting and planning only");
  }
  absl::MutexLock lock(&mu_);
  PlacementRequest req;
  req.world_size = static_cast<int>(spec.parallelism.world_size);
  req.expert_parallel = static_cast<int>(spec.parallelism.expert_parallel);
  req.within = spec.placement.expert_group_within;
  req.device_type = spec.resources.device;
  Status feasible = CheckFeasible(req, workers_.LiveSlots());
  if (!feasible.ok()) return FailedPreconditionError("the job can never fit: " + feasible.message());
  if (spec.checkpoint.dir.empty() && !options_.checkpoint_root.empty()) {
    // Filled in once the id is known (below).
  }
  MOE_ASSIGN_OR_RETURN(JobEntry * e, jobs_.Create(SpecToProto(spec), spec));
  if (e->spec.checkpoint.dir.empty() && !options_.checkpoint_root.empty()) {
    e->spec.checkpoint.dir = JoinPath(options_.checkpoint_root, e->job.id());
    *e->job.mutable_spec() = SpecToProto(e->spec);
    jobs_.Persist(*e);
  }
  metrics_.OnJobState(e->job.id(), e->job.state());
  schedule_needed_ = true;
  Schedule();
  return e->job;
}

StatusOr<moe::v1::Job> Controller::Get(const std::string& id, bool with_events) {
  absl::MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  moe::v1::Job out = e->job;
  if (with_events) {
    auto events = jobs_.Events(id);
    if (events.ok()) for (auto& ev : *events) *out.add_events() = std::move(ev);
  }
  return out;
}

std::vector<moe::v1::Job> Controller::List(const std::vector<JobState>& states) {
  absl::MutexLock lock(&mu_);
  std::vector<moe::v1::Job> out;
  for (JobEntry* e : jobs_.All()) {
    if (!states.empty() && std::find(states.begin(), states.end(), e->job.state()) == states.end()) continue;
    out.push_back(e->job);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.created_at() < b.created_at(); });
  return out;
}

StatusOr<moe::v1::Job> Controller::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  if (IsTerminal(e->job.state())) {
    return FailedPreconditionError("job " + id + " already ended (" + moe::v1::JobState_Name(e->job.state()) + ")");
  }
  if (e->attempt) StopRanks(*e, "cancelled by a user");
  MOE_RETURN_IF_ERROR(jobs_.Transition(*e, moe::v1::CANCELLED, "Cancelled", "cancelled by a user"));
  metrics_.OnJobState(id, moe::v1::CANCELLED);
  schedule_needed_ = true;
  return e->job;
}

StatusOr<int64_t> Controller::Watch(const std::string& id, WatchFn fn) {
  absl::MutexLock lock(&mu_);
  JobEntry* e = jobs_.Find(id);
  if (e == nullptr) return NotFoundError("no job '" + id + "'");
  return jobs_.Watch(*e, std::move(fn));
}

void Controller::Unwatch(int64_t subscription) {
  absl::MutexLock lock(&mu_);
  jobs_.Unwatch(subscription);
}

std::vector<moe::v1::Worker> Controller::Workers() {
  absl::MutexLock lock(&mu_);
  return workers_.List();
}

StatusOr<moe::v1::Worker> Controller::SetDrained(const std::string& name, bool drained) {
  absl::MutexLock lock(&mu_);
  MOE_RETURN_IF_ERROR(workers_.SetDrained(name, drained));
  MOE_LOG(INFO) << "worker " << name << (drained ? " drained" : " undrained");
  schedule_needed_ = true;
  return workers_.Describe(*workers_.Find(name));
}

StatusOr<moe::v1::Registered> Controller::Register(const moe::v1::Register& reg, WorkerChannel* channel) {
  absl::MutexLock lock(&mu_);
  MOE_ASSIGN_OR_RETURN(WorkerEntry * w, workers_.Register(reg, channel));
  MOE_LOG(INFO) << "worker " << reg.name() << " registered: rack " << reg.rack() << ", node " << reg.node() << ", "
                << reg.device() << (reg.running_size() ? ", running " + std::to_string(reg.running_size()) + " rank(s)" : "");
  // Ranks that ended while it was away.
  for (const auto& f : reg.finished()) HandleFinished(reg.name(), f);
  // What it says it runs: bind it to the attempt we know, or tell it to stop.
  for (const auto& r : reg.running()) {
    JobEntry* e = AttemptOf(r.job_id(), r.attempt(), r.rank());
    if (e != nullptr && e->attempt->ranks[static_cast<size_t>(r.rank())].worker == reg.name() && !e->attempt->ending) {
      workers_.Assign(reg.name(), r.job_id(), r.attempt(), r.rank());
      e->attempt->ranks[static_cast<size_t>(r.rank())].started = true;
      continue;
    }
    moe::v1::ControllerMessage m;
    m.mutable_cancel()->set_job_id(r.job_id());
    m.mutable_cancel()->set_attempt(r.attempt());
    m.mutable_cancel()->set_reason("the controller does not know this attempt (any more)");
    channel->Send(m);
    MOE_LOG(WARNING) << "worker " << reg.name() << " runs unknown rank " << r.rank() << " of " << r.job_id() << " attempt "
                     << r.attempt() << "; told it to stop";
  }
  // A reconnecting worker that was assigned a rank but does not report it lost it (it restarted).
  if (w->busy()) {
    bool reported = false;
    for (const auto& r : reg.running()) reported |= r.job_id() == w->job_id && r.attempt() == w->attempt;
    if (!reported) {
      JobEntry* e = jobs_.Find(w->job_id);
      const std::string job = w->job_id;
      workers_.Release(reg.name());
      if (e != nullptr && e->attempt && e->attempt->number == w->attempt && !e->attempt->ending) {
        FailAttempt(*e, "worker " + reg.name() + " came back without its rank (it restarted)");
      }
    }
  }
  schedule_needed_ = true;
  Schedule();
  moe::v1::Registered out;
  out.set_name(reg.name());
  out.set_lease_seconds(options_.lease_seconds);
  out.set_heartbeat_seconds(options_.heartbeat_seconds);
  return out;
}

JobEntry* Controller::AttemptOf(const std::string& job_id, int attempt, int rank) {
  JobEntry* e = jobs_.Find(job_id);
  if (e == nullptr || !e->attempt || e->attempt->number != attempt) return nullptr;
  if (rank < 0 || rank >= static_cast<int>(e->attempt->ranks.size())) return nullptr;
  return e;
}

void Controller::OnWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg) {
  absl::MutexLock lock(&mu_);
  workers_.Heartbeat(worker);  // any message renews the lease
  switch (msg.msg_case()) {
    case moe::v1::WorkerMessage::kHeartbeat:
      return;
    case moe::v1::WorkerMessage::kStarted: {
      const auto& s = msg.started();
      JobEntry* e = AttemptOf(s.job_id(), s.attempt(), s.rank());
      if (e == nullptr || e->attempt->ending) return;
      e->attempt->ranks[static_cast<size_t>(s.rank())].started = true;
      return;
    }
    case moe::v1::WorkerMessage::kStep: {
      const auto& s = msg.step();
      JobEntry* e = AttemptOf(s.job_id(), s.attempt(), s.rank());
      if (e == nullptr || e->attempt->ending) return;
      RankStatus& rs = e->attempt->ranks[static_cast<size_t>(s.rank())];
      rs.started = true;
      rs.last_step = s.metrics().step();
      rs.last_step_seconds = s.metrics().step_seconds();
      if (e->job.state() == moe::v1::SCHEDULED) {
        (void)jobs_.Transition(*e, moe::v1::RUNNING, "Running", "attempt " + std::to_string(e->attempt->number) + " is training");
        metrics_.OnJobState(e->job.id(), moe::v1::RUNNING);
      }
      std::vector<StragglerChange> changes;
      auto job_metrics = metrics_.OnStep(s.job_id(), s.attempt(), s.rank(), s.metrics(), &changes);
      for (const auto& c : changes) {
        const auto& slot = e->attempt->slots[static_cast<size_t>(c.rank)];
        char ratio[32];
        std::snprintf(ratio, sizeof(ratio), "%.2f", c.ratio);
        jobs_.Event(*e, c.flagged ? "Straggler" : "StragglerRecovered",
                    "rank " + std::to_string(c.rank) + " on " + slot.worker + " (rack " + slot.rack + ", node " + slot.node +
                        "): compute time " + ratio + "x the job's median");
      }
      if (job_metrics) jobs_.PublishMetrics(*e, *job_metrics);
      return;
    }
    case moe::v1::WorkerMessage::kFinished:
      HandleFinished(worker, msg.finished());
      return;
    default:
      return;
  }
}

void Controller::HandleFinished(const std::string& worker, const moe::v1::RankFinished& f) {
  WorkerEntry* w = workers_.Find(worker);
  if (w != nullptr && w->job_id == f.job_id() && w->attempt == f.attempt()) workers_.Release(worker);
  schedule_needed_ = true;
  JobEntry* e = AttemptOf(f.job_id(), f.attempt(), f.rank());
  if (e != nullptr) RankFinished(*e, f.rank(), f);
  Schedule();  // the freed worker (or a restart) may let a queued job go now
}

void Controller::RankFinished(JobEntry& e, int rank, const moe::v1::RankFinished& f) {
  RankStatus& rs = e.attempt->ranks[static_cast<size_t>(rank)];
  if (rs.finished) return;
  rs.finished = true;
  rs.ok = f.ok();
  const std::string where = "rank " + std::to_string(rank) + " on worker " + rs.worker;
  if (!f.ok() && !e.attempt->ending && !IsTerminal(e.job.state())) {
    std::string why = f.message().empty() ? "exited with code " + std::to_string(f.exit_code()) : f.message();
    // moe-train's exit codes 2 (bad spec) and 4 (cannot run as specified, e.g. a checkpoint of another
    // layout): a restart would fail the same way.
    const bool permanent = f.exit_code() == 2 || f.exit_code() == 4;
    FailAttempt(e, where + " failed: " + why, permanent);  // may end the attempt
  }
  schedule_needed_ = true;
  if (!e.attempt || e.attempt->live_ranks() > 0) return;
  // Every rank is done.
  bool all_ok = true;
  for (const auto& r : e.attempt->ranks) all_ok = all_ok && r.ok;
  rendezvous_.ErasePrefix(RendezvousPrefix(e.job.id(), e.attempt->number));
  e.attempt.reset();
  if (all_ok && !IsTerminal(e.job.state()) && e.job.state() != moe::v1::RESTARTING) {
    (void)jobs_.Transition(e, moe::v1::SUCCEEDED, "Succeeded", "all " + std::to_string(e.spec.parallelism.world_size) + " ranks finished");
    metrics_.OnJobState(e.job.id(), moe::v1::SUCCEEDED);
  }
}

void Controller::FailAttempt(JobEntry& e, const std::string& reason, bool permanent) {
  if (!e.attempt || e.attempt->ending) return;
  jobs_.Event(e, "AttemptFailed", "attempt " + std::to_string(e.attempt->number) + ": " + reason);
  StopRanks(e, reason);  // may end the attempt when no rank is left to stop
  if (permanent) {
    (void)jobs_.Transition(e, moe::v1::FAILED, "Failed", reason + " (not retried: the job cannot run as specified)");
    metrics_.OnJobState(e.job.id(), moe::v1::FAILED);
  } else if (e.job.restarts() < e.spec.max_restarts) {
    e.job.set_restarts(e.job.restarts() + 1);
    (void)jobs_.Transition(e, moe::v1::RESTARTING, "Restarting",
                           "restart " + std::to_string(e.job.restarts()) + " of " + std::to_string(e.spec.max_restarts) +
                               " from the latest complete checkpoint (" + reason + ")");
    metrics_.OnRestart(e.job.id());
    metrics_.OnJobState(e.job.id(), moe::v1::RESTARTING);
  } else {
    (void)jobs_.Transition(e, moe::v1::FAILED, "Failed",
                           reason + " (after " + std::to_string(e.job.restarts()) + " restart(s); max_restarts is " +
                               std::to_string(e.spec.max_restarts) + ")");
    metrics_.OnJobState(e.job.id(), moe::v1::FAILED);
  }
  schedule_needed_ = true;
}

void Controller::StopRanks(JobEntry& e, const std::string& reason) {
  Attempt& a = *e.attempt;
  a.ending = true;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    RankStatus& rs = a.ranks[r];
    if (rs.finished) continue;
    WorkerEntry* w = workers_.Find(rs.worker);
    if (w == nullptr || w->lost || w->channel == nullptr) {
      // Nobody to tell: the rank is gone with its worker.
      rs.finished = true;
      if (w != nullptr && w->job_id == e.job.id()) workers_.Release(rs.worker);
      continue;
    }
    moe::v1::ControllerMessage m;
    m.mutable_cancel()->set_job_id(e.job.id());
    m.mutable_cancel()->set_attempt(a.number);
    m.mutable_cancel()->set_reason(reason);
    w->channel->Send(m);
  }
  if (a.live_ranks() == 0) {
    rendezvous_.ErasePrefix(RendezvousPrefix(e.job.id(), a.number));
    e.attempt.reset();
  }
}

void Controller::WorkerLost(const std::string& name, const std::string& why) {
  WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return;
  MOE_LOG(WARNING) << "worker " << name << " lost: " << why;
  if (!w->busy()) return;
  const std::string job = w->job_id;
  const int attempt = w->attempt, rank = w->rank;
  workers_.Release(name);
  JobEntry* e = AttemptOf(job, attempt, rank);
  if (e == nullptr) return;
  RankStatus& rs = e->attempt->ranks[static_cast<size_t>(rank)];
  rs.finished = true;
  rs.ok = false;
  if (!e->attempt->ending) {
    FailAttempt(*e, "worker " + name + " (rank " + std::to_string(rank) + ", rack " + w->info.rack() + ") lost: " + why);
  } else if (e->attempt && e->attempt->live_ranks() == 0) {
    rendezvous_.ErasePrefix(RendezvousPrefix(e->job.id(), e->attempt->number));
    e->attempt.reset();
  }
  schedule_needed_ = true;
}

void Controller::Disconnected(const std::string& worker, WorkerChannel* channel) {
  absl::MutexLock lock(&mu_);
  if (workers_.Disconnected(worker, channel)) WorkerLost(worker, "its stream closed");
}

std::string Controller::RendezvousPrefix(const std::string& job_id, int attempt) const {
  return "job/" + job_id + "/attempt/" + std::to_string(attempt) + "/";
}

void Controller::SendTo(const std::string& worker, const moe::v1::ControllerMessage& msg) {
  WorkerEntry* w = workers_.Find(worker);
  if (w != nullptr && w->channel != nullptr) w->channel->Send(msg);
}

void Controller::StartAttempt(JobEntry& e, const std::vector<Slot>& slots) {
  const int number = e.job.attempt() + 1;
  e.job.set_attempt(number);
  e.job.clear_placement();
  e.attempt = std::make_unique<Attempt>();
  e.attempt->number = number;
  e.attempt->slots = slots;
  std::vector<RankInfo> info;
  std::map<std::string, int> per_rack;
  for (size_t r = 0; r < slots.size(); ++r) {
    auto* p = e.job.add_placement();
    p->set_rank(static_cast<int>(r));
    p->set_worker(slots[r].worker);
    p->set_rack(slots[r].rack);
    p->set_node(slots[r].node);
    p->set_device(slots[r].device);
    RankStatus rs;
    rs.worker = slots[r].worker;
    e.attempt->ranks.push_back(rs);
    info.push_back({slots[r].rack, slots[r].worker});
    per_rack[slots[r].rack]++;
    workers_.Assign(slots[r].worker, e.job.id(), number, static_cast<int>(r));
  }
  metrics_.StartAttempt(e.job.id(), number, info, e.spec.parallelism.world_size);
  const std::string spec_json = SpecToJson(e.spec);
  for (size_t r = 0; r < slots.size(); ++r) {
    moe::v1::ControllerMessage m;
    auto* a = m.mutable_assign();
    a->set_job_id(e.job.id());
    a->set_attempt(number);
    a->set_rank(static_cast<int>(r));
    a->set_world_size(static_cast<int>(slots.size()));
    a->set_spec_json(spec_json);
    a->set_rendezvous_prefix(RendezvousPrefix(e.job.id(), number));
    a->set_checkpoint_dir(e.spec.checkpoint.dir);
    a->set_resume(true);
    a->set_cpu_threads(workers_.CpuThreadsFor(slots[r].worker));
    SendTo(slots[r].worker, m);
  }
  std::string where;
  for (const auto& [rack, n] : per_rack) where += (where.empty() ? "" : ", ") + std::to_string(n) + " in rack " + rack;
  (void)jobs_.Transition(e, moe::v1::SCHEDULED, "Scheduled", "attempt " + std::to_string(number) + ": " + where);
  metrics_.OnJobState(e.job.id(), moe::v1::SCHEDULED);
}

void Controller::Schedule() {
  if (!schedule_needed_) return;
  schedule_needed_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<QueuedJob> queue;
  for (JobEntry* e : jobs_.All()) {
    const JobState s = e->job.state();
    // A restarting job waits until its previous attempt's ranks have stopped.
    if ((s == moe::v1::PENDING || s == moe::v1::RESTARTING) && !e->attempt) {
      queue.push_back({e->job.id(), e->spec.priority, e->job.created_at()});
    }
  }
  std::vector<Slot> free = workers_.FreeSlots();
  for (const QueuedJob& q : QueueOrder(queue)) {
    JobEntry* e = jobs_.Find(q.id);
    PlacementRequest req;
    req.world_size = static_cast<int>(e->spec.parallelism.world_size);
    req.expert_parallel = static_cast<int>(e->spec.parallelism.expert_parallel);
    req.within = e->spec.placement.expert_group_within;
    req.device_type = e->spec.resources.device;
    for (const auto& p : e->job.placement()) req.previous.push_back({p.worker(), p.rack(), p.node(), p.device()});
    auto placed = Place(req, free);
    if (!placed.ok()) continue;  // a smaller job further down may fit now
    StartAttempt(*e, *placed);
    std::set<std::string> used;
    for (const auto& s : *placed) used.insert(s.worker);
    std::vector<Slot> rest;
    for (auto& s : free) if (!used.count(s.worker)) rest.push_back(std::move(s));
    free = std::move(rest);
  }
  metrics_.ObserveSchedulerDecision(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void Controller::Tick() {
  absl::MutexLock lock(&mu_);
  for (const auto& name : workers_.ExpireLeases()) {
    WorkerLost(name, "no heartbeat for " + std::to_string(static_cast<int>(options_.lease_seconds)) + " s (lease expired)");
    schedule_needed_ = true;
  }
  // After a controller restart: attempts whose ranks did not all come back fail.
  const double now = clock_.Monotonic();
  for (JobEntry* e : jobs_.All()) {
    if (!e->attempt || e->attempt->reconnect_deadline == 0) continue;
    Attempt& a = *e->attempt;
    std::vector<int> missing;
    for (size_t r = 0; r < a.ranks.size(); ++r) {
      const WorkerEntry* w = workers_.Find(a.ranks[r].worker);
      const bool back = w != nullptr && !w->lost && w->job_id == e->job.id() && w->attempt == a.number;
      if (!back && !a.ranks[r].finished) missing.push_back(static_cast<int>(r));
    }
    if (missing.empty()) {
      a.reconnect_deadline = 0;
      jobs_.Event(*e, "Reconnected", "all " + std::to_string(a.ranks.size()) + " ranks reported back; attempt " +
                                         std::to_string(a.number) + " carries on");
    } else if (now > a.reconnect_deadline) {
      a.reconnect_deadline = 0;
      for (int r : missing) a.ranks[static_cast<size_t>(r)].finished = true;
      FailAttempt(*e, std::to_string(missing.size()) + " rank(s) did not report back after the controller restarted (rank " +
                          std::to_string(missing.front()) + " on " + a.ranks[static_cast<size_t>(missing.front())].worker + ")");
    }
  }
  rendezvous_.Expire(now);
  Schedule();
  size_t queued = 0;
  for (JobEntry* e : jobs_.All()) queued += (e->job.state() == moe::v1::PENDING || e->job.state() == moe::v1::RESTARTING) ? 1 : 0;
  metrics_.SetQueueLength(queued);
  metrics_.SetWorkers(workers_.List());
  metrics_.Expire();
}

size_t Controller::QueueLength() {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (JobEntry* e : jobs_.All()) n += (e->job.state() == moe::v1::PENDING || e->job.state() == moe::v1::RESTARTING) ? 1 : 0;
  return n;
}

}  // namespace moe::controller
