#include "controller/job_manager.h"

#include <algorithm>
#include <random>

#include "common/job_spec_proto.h"
#include "common/log.h"
#include "controller/goodput.h"

namespace moe::controller {

using moe::v1::JobState;

std::string NormalizePath(const std::string& path) {
  std::string out;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (!part.empty() && part != ".") out += "/" + part;
    i = j + 1;
  }
  if (out.empty()) return path.empty() ? "" : (path[0] == '/' ? "/" : ".");
  return path[0] == '/' ? out : out.substr(1);
}

bool IsQueued(JobState s) {
  return s == moe::v1::PENDING || s == moe::v1::RESTARTING || s == moe::v1::PREEMPTED;
}

const char* WaitClassName(WaitClass c) {
  switch (c) {
    case WaitClass::kQuota:
      return "quota";
    case WaitClass::kCapacity:
      return "capacity";
    case WaitClass::kBusy:
      return "busy";
    case WaitClass::kDependency:
      return "dependency";
    case WaitClass::kBackoff:
      return "backoff";
    case WaitClass::kPreempting:
      return "preempting";
    case WaitClass::kHeld:
      return "held";
    case WaitClass::kNone:
    case WaitClass::kStuck:
      break;
  }
  return "stuck";
}

bool ValidTransition(JobState from, JobState to) {
  using namespace moe::v1;
  if (IsTerminal(from) || from == to) return false;
  switch (from) {
    case PENDING:
      return to == SCHEDULED || to == CANCELLED || to == FAILED;
    case SCHEDULED:
      return to == RUNNING || to == RESTARTING || to == PREEMPTED || to == FAILED ||
             to == CANCELLED || to == SUCCEEDED || to == STOPPING;
    case RUNNING:
      return to == SUCCEEDED || to == FAILED || to == CANCELLED || to == RESTARTING ||
             to == PREEMPTED || to == STOPPING;
    case RESTARTING:
    case PREEMPTED:  // STOPPING: told to stop while the failed attempt's ranks still end
      return to == SCHEDULED || to == FAILED || to == CANCELLED || to == STOPPING || to == TIMEOUT;
    case STOPPING:  // SUCCEEDED: every rank finished its last step before the stop reached it
      return to == CANCELLED || to == TIMEOUT || to == SUCCEEDED;
    default:
      return false;
  }
}

Status JobManager::Load() {
  MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::Job> jobs, store_.LoadJobs());
  for (auto& j : jobs) {
    auto spec = SpecFromProto(j.spec());
    MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> events, store_.LoadEvents(j.id()));
    auto e = std::make_unique<JobEntry>();
    if (!spec.ok()) {
      // Kept and shown, never dropped: the stored record stays as it is (a controller that reads
      // it again sees the job as it was), this one neither runs nor expires it.
      MOE_LOG(ERROR) << "stored job " << j.id()
                     << " has a spec this controller cannot read: " << spec.status()
                     << "; kept as INVALID";
      j.set_state(moe::v1::INVALID);
      j.set_message(
          "this controller cannot read the stored spec: " + spec.status().message() +
          " (the record is kept as it is; delete the job or run a controller that reads it)");
      // What finds it (a dependency by name, a label selector) from its record as it is.
      e->spec.name = j.spec().metadata().name();
      e->spec.labels = {j.spec().metadata().labels().begin(), j.spec().metadata().labels().end()};
    } else {
      e->spec = *spec;
    }
    e->job = std::move(j);
    e->next_event_seq = events.empty() ? 1 : events.back().seq() + 1;
    Index(e.get());
    by_created_[{e->job.created_at(), e->job.id()}] = e.get();
    if (IsQueued(e->job.state())) queued_[e->job.id()] = e.get();
    CountWaiting(*e, false, +1);
    jobs_[e->job.id()] = std::move(e);
  }
  for (auto& [id, e] : jobs_) {
    for (JobListener* l : listeners_) l->OnJobStateChanged(e->job, moe::v1::JOB_STATE_UNSPECIFIED);
  }
  return OkStatus();
}

std::string JobManager::NewId(const std::string& name) const {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::string id;
  do {
    std::string suffix;
    for (int i = 0; i < 5; ++i) suffix += kAlphabet[rng() % 27];
    id = name + "-" + suffix;
  } while (jobs_.count(id));
  return id;
}

StatusOr<JobEntry*> JobManager::Create(const std::string& id, const moe::v1::TrainingJob& expanded,
                                       const JobSpec& spec, const std::string& request_id,
                                       const std::string& actor) {
  if (jobs_.count(id)) return AlreadyExistsError("job " + id + " exists");
  auto e = std::make_unique<JobEntry>();
  e->job.set_id(id);
  e->job.set_request_id(request_id);
  e->job.set_owner(actor);
  *e->job.mutable_spec() = expanded;
  e->job.set_state(moe::v1::PENDING);
  e->job.set_created_at(clock_.Now());
  e->job.set_updated_at(clock_.Now());
  GoodputOnState(e->job, clock_.Now());  // queued from now
  e->spec = spec;
  const moe::v1::JobEvent ev = NewEvent(
      *e, e->job, "Submitted",
      "priority " + std::to_string(spec.priority) + ", " +
          std::to_string(spec.parallelism.world_size) + " ranks (EP " +
          std::to_string(spec.parallelism.expert_parallel) + ", groups within one " +
          spec.placement.expert_group_within + ")" + (actor.empty() ? "" : "; by " + actor));
  e->next_event_seq = ev.seq() + 1;
  e->last_persist = clock_.Monotonic();
  JobEntry* raw = e.get();
  // In the map from now (its name and checkpoint directory taken), seen once stored: the write may
  // wait for its batch with the controller's lock released.
  raw->creating = true;
  jobs_[id] = std::move(e);
  Index(raw);
  queued_[id] = raw;  // PENDING
  by_created_[{raw->job.created_at(), id}] = raw;
  if (Status st = store_.PutJobWithEvent(raw->job, ev); !st.ok()) {
    Unindex(raw);
    queued_.erase(id);
    by_created_.erase({raw->job.created_at(), id});
    jobs_.erase(id);
    return st;
  }
  raw->creating = false;
  CountWaiting(*raw, false, +1);
  for (JobListener* l : listeners_) l->OnJobEventRecorded(raw->job, ev);
  for (JobListener* l : listeners_) l->OnJobStateChanged(raw->job, moe::v1::JOB_STATE_UNSPECIFIED);
  return raw;
}

Status JobManager::Delete(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFoundError("no job '" + id + "'");
  if (!IsTerminal(it->second->job.state())) {
    return FailedPreconditionError("job " + id + " is " +
                                   moe::v1::JobState_Name(it->second->job.state()) +
                                   ": only finished jobs are deleted (cancel it first)");
  }
  {
    Writing w(*it->second);
    MOE_RETURN_IF_ERROR(store_.DeleteJob(id));  // stored first: a refused delete keeps the job
  }
  // Logged first: `id` may be the entry's own string, which the erase frees.
  MOE_LOG(INFO) << "job " << id << " deleted";
  it = jobs_.find(id);          // Create may have added to the map while the write waited
  const std::string gone = id;  // `id` may be the entry's own string, which the erase frees
  Unindex(it->second.get());
  by_created_.erase({it->second->job.created_at(), gone});
  queued_.erase(gone);  // finished: neither queued nor with an attempt
  with_attempt_.erase(gone);
  jobs_.erase(it);
  for (JobListener* l : listeners_) l->OnJobDeleted(gone);
  return OkStatus();
}

void JobManager::SetCheckpointKey(std::function<std::string(const std::string& dir)> key) {
  checkpoint_key_ = std::move(key);
  last_dir_.clear();
  last_key_.clear();
  by_checkpoint_.clear();
  by_request_.clear();
  for (auto& [id, e] : jobs_) Index(e.get());
}

void JobManager::Index(JobEntry* e) {
  if (!e->job.request_id().empty()) by_request_[e->job.request_id()] = e;
  if (!checkpoint_key_ || e->spec.checkpoint.dir.empty()) return;
  e->resolved_checkpoint_dir = CheckpointKey(e->spec.checkpoint.dir);
  last_dir_.clear();  // remembered for this Create alone: a later check resolves the path again
  by_checkpoint_.emplace(e->resolved_checkpoint_dir, e);
}

void JobManager::Unindex(JobEntry* e) {
  if (auto it = by_request_.find(e->job.request_id()); it != by_request_.end() && it->second == e)
    by_request_.erase(it);
  auto [first, last] = by_checkpoint_.equal_range(e->resolved_checkpoint_dir);
  for (auto it = first; it != last; ++it) {
    if (it->second != e) continue;
    by_checkpoint_.erase(it);
    return;
  }
}

std::string JobManager::CheckpointKey(const std::string& dir) {
  if (!checkpoint_key_) return "";
  if (dir != last_dir_ || last_key_.empty()) {
    last_key_ = checkpoint_key_(dir);
    last_dir_ = dir;
  }
  return last_key_;
}

JobEntry* JobManager::FindByRequestId(const std::string& request_id) {
  auto it = by_request_.find(request_id);
  return it == by_request_.end() ? nullptr : it->second;
}

// `key` itself, the keys beneath it (key + "/..."), and each ancestor of it ("/a" and "/" for
// "/a/b"): every directory that equals, holds or lies inside it.
std::vector<JobEntry*> JobManager::CheckpointNeighbours(const std::string& key) {
  if (!checkpoint_key_ || key.empty() || key == "/") return AllWithCreating();
  std::vector<JobEntry*> out;
  const auto take = [&](auto first, auto last) {
    for (auto it = first; it != last; ++it) out.push_back(it->second);
  };
  const auto [same_first, same_last] = by_checkpoint_.equal_range(key);
  take(same_first, same_last);
  take(by_checkpoint_.lower_bound(key + "/"),
       by_checkpoint_.lower_bound(key + "0"));  // '0' follows '/'
  for (size_t slash = key.find('/', 1); slash != std::string::npos;
       slash = key.find('/', slash + 1)) {
    const auto [first, last] = by_checkpoint_.equal_range(key.substr(0, slash));
    take(first, last);
  }
  const auto [root_first, root_last] = by_checkpoint_.equal_range("/");
  take(root_first, root_last);
  return out;
}

JobEntry* JobManager::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() || it->second->creating ? nullptr : it->second.get();
}

std::vector<JobEntry*> JobManager::All() {
  std::vector<JobEntry*> out;
  out.reserve(jobs_.size());
  for (auto& [id, e] : jobs_) {
    if (!e->creating) out.push_back(e.get());
  }
  return out;
}

std::vector<JobEntry*> JobManager::AllWithCreating() {
  std::vector<JobEntry*> out;
  out.reserve(jobs_.size());
  for (auto& [id, e] : jobs_) out.push_back(e.get());
  return out;
}

void JobManager::SetRecord(JobEntry& e, moe::v1::Job record) {
  if (IsQueued(record.state()))
    queued_[record.id()] = &e;
  else
    queued_.erase(record.id());
  CountWaiting(e, e.attempt != nullptr, -1);
  e.job = std::move(record);
  CountWaiting(e, e.attempt != nullptr, +1);
}

void JobManager::CountWaiting(const JobEntry& e, bool has_attempt, int64_t delta) {
  if (e.creating || has_attempt || !IsQueued(e.job.state())) return;
  auto it = waiting_.try_emplace(e.spec.queue, 0).first;
  if ((it->second += delta) == 0) waiting_.erase(it);
}

std::vector<JobEntry*> JobManager::Queued() {
  std::vector<JobEntry*> out;
  out.reserve(queued_.size());
  for (const auto& [id, e] : queued_) {
    if (!e->creating) out.push_back(e);
  }
  return out;
}

std::vector<JobEntry*> JobManager::WithAttempt() {
  std::vector<JobEntry*> out;
  out.reserve(with_attempt_.size());
  for (const auto& [id, e] : with_attempt_) out.push_back(e);
  return out;
}

void JobManager::AttemptChanged(JobEntry& e) {
  CountWaiting(e, with_attempt_.count(e.job.id()) > 0, -1);  // as it was
  if (e.attempt)
    with_attempt_[e.job.id()] = &e;
  else
    with_attempt_.erase(e.job.id());
  CountWaiting(e, e.attempt != nullptr, +1);
}

std::vector<const JobEntry*> JobManager::CreatedAfter(
    const std::pair<double, std::string>& after, size_t limit,
    const std::function<bool(const JobEntry&)>& match) {
  std::vector<const JobEntry*> out;
  for (auto it = by_created_.upper_bound(after); it != by_created_.end() && out.size() < limit;
       ++it) {
    if (!it->second->creating && match(*it->second)) out.push_back(it->second);
  }
  return out;
}

moe::v1::JobEvent JobManager::NewEvent(const JobEntry& e, const moe::v1::Job& record,
                                       const std::string& type, const std::string& message) const {
  moe::v1::JobEvent ev;
  ev.set_job_id(record.id());
  ev.set_seq(e.next_event_seq);
  ev.set_time(clock_.Now());
  ev.set_type(type);
  ev.set_state(record.state());
  ev.set_message(message);
  ev.set_attempt(record.attempt());
  return ev;
}

StatusOr<JobManager::Staged> JobManager::Stage(const JobEntry& e,
                                               const TransitionRequest& t) const {
  const JobState from = e.job.state();
  if (!ValidTransition(from, t.to)) {
    return FailedPreconditionError("job " + e.job.id() + " cannot go from " +
                                   moe::v1::JobState_Name(from) + " to " +
                                   moe::v1::JobState_Name(t.to));
  }
  Staged out{from, {e.job, {}}};
  moe::v1::Job& next = out.write.job;
  if (t.edit) t.edit(next);
  next.set_state(t.to);
  next.set_message(t.message);
  next.set_updated_at(clock_.Now());
  GoodputOnState(next, clock_.Now());
  out.write.event = NewEvent(e, next, t.type, t.message);
  return out;
}

void JobManager::Apply(JobEntry& e, Staged staged) {
  const moe::v1::JobEvent& ev = staged.write.event;
  SetRecord(e, std::move(staged.write.job));
  e.next_event_seq = ev.seq() + 1;
  e.last_persist = clock_.Monotonic();
  MOE_LOG(INFO) << "job " << e.job.id() << ": " << moe::v1::JobState_Name(staged.from) << " -> "
                << moe::v1::JobState_Name(e.job.state())
                << (e.job.message().empty() ? "" : " (" + e.job.message() + ")");
  for (JobListener* l : listeners_) l->OnJobEventRecorded(e.job, ev);
  for (JobListener* l : listeners_) l->OnJobStateChanged(e.job, staged.from);
}

Status JobManager::Transition(JobEntry& e, JobState to, const std::string& type,
                              const std::string& message, const Edit& edit) {
  MOE_ASSIGN_OR_RETURN(Staged staged, Stage(e, {&e, to, type, message, edit}));
  {
    Writing w(e);
    // Stored first: a refused write leaves the job as it was.
    MOE_RETURN_IF_ERROR(store_.PutJobWithEvent(staged.write.job, staged.write.event));
  }
  Apply(e, std::move(staged));
  return OkStatus();
}

Status JobManager::TransitionAll(const std::vector<TransitionRequest>& changes) {
  std::vector<Staged> staged;
  std::vector<JobWithEvent> writes;
  for (const TransitionRequest& t : changes) {
    MOE_ASSIGN_OR_RETURN(Staged one, Stage(*t.e, t));
    writes.push_back(one.write);
    staged.push_back(std::move(one));
  }
  if (changes.empty()) return OkStatus();
  for (const TransitionRequest& t : changes) t.e->writing = true;
  const Status st = store_.PutJobsWithEvents(writes);
  for (const TransitionRequest& t : changes) t.e->writing = false;
  MOE_RETURN_IF_ERROR(st);
  for (size_t i = 0; i < changes.size(); ++i) Apply(*changes[i].e, std::move(staged[i]));
  return OkStatus();
}

Status JobManager::Event(JobEntry& e, const std::string& type, const std::string& message) {
  const moe::v1::JobEvent ev = NewEvent(e, e.job, type, message);
  {
    Writing w(e);
    MOE_RETURN_IF_ERROR(store_.AppendEvent(ev));
  }
  e.next_event_seq = ev.seq() + 1;
  for (JobListener* l : listeners_) l->OnJobEventRecorded(e.job, ev);
  return OkStatus();
}

Status JobManager::RecordCheckpoint(JobEntry& e, int64_t step) {
  if (step <= e.job.checkpoint_step()) return OkStatus();
  moe::v1::Job record = e.job;
  record.set_checkpoint_step(step);
  record.set_checkpoint_time(clock_.Now());
  return Persist(e, std::move(record));
}

Status JobManager::Persist(JobEntry& e, moe::v1::Job record) {
  // Telemetry: with the one writer it joins the next batch, not waited for; while a write of the
  // job is in flight (a transition, which is newer) it is left out: the next save carries it.
  if (committer_ != nullptr) {
    if (!e.writing) committer_->PutJobLater(record);
  } else {
    MOE_RETURN_IF_ERROR(store_.PutJob(record));
  }
  SetRecord(e, std::move(record));
  e.last_persist = clock_.Monotonic();
  return OkStatus();
}

namespace {

// Adds a step to the job's run summary (moe::v1::RunSummary) and its newest checkpoint, with when
// it first showed (Job.checkpoint_time: moe_job_checkpoint_age_seconds).
void AddToSummary(moe::v1::Job& job, const moe::v1::StepMetrics& m) {
  if (m.checkpoint_step() > job.checkpoint_step() || job.checkpoint_time() == 0)
    job.set_checkpoint_time(m.time());
  job.set_checkpoint_step(std::max(job.checkpoint_step(), m.checkpoint_step()));
  moe::v1::RunSummary& s = *job.mutable_summary();
  if (s.reported_steps() == 0) s.set_first_step(m.step()), s.set_first_loss(m.loss());
  s.set_reported_steps(s.reported_steps() + 1);
  const bool first_of_attempt = s.attempt() != m.attempt();
  s.set_attempt(m.attempt());
  if (first_of_attempt && m.step() < m.total_steps())
    return;  // warm-up; a one-step attempt still counts
  s.set_measured_steps(s.measured_steps() + 1);
  s.set_tflops_sum(s.tflops_sum() + m.tflops_per_device());
  s.set_mfu_sum(s.mfu_sum() + m.mfu());
  s.set_tokens_per_second_sum(s.tokens_per_second_sum() + m.tokens_per_second());
  s.set_step_seconds_sum(s.step_seconds_sum() + m.step_seconds());
}

}  // namespace

Status JobManager::PublishMetrics(JobEntry& e, const moe::v1::StepMetrics& m) {
  // Metrics change every step: the record is stored at most every few seconds, so a restarted
  // controller may show metrics that old (the next step replaces them).
  // A step with a validation result updates the record's last_eval and is stored at once.
  AddToSummary(e.job, m);
  GoodputOnStep(e.job, m, clock_.Now());
  if (m.has_eval_loss()) {
    moe::v1::Job next = e.job;
    *next.mutable_last_metrics() = m;
    auto* ev = next.mutable_last_eval();
    ev->set_step(m.step());
    ev->set_loss(m.eval_loss());
    ev->set_ppl(m.eval_ppl());
    ev->set_mtp_loss(m.eval_mtp_loss());
    MOE_RETURN_IF_ERROR(Persist(e, std::move(next)));
  } else if (clock_.Monotonic() - e.last_persist >= kMetricsPersistSeconds) {
    moe::v1::Job next = e.job;
    *next.mutable_last_metrics() = m;
    MOE_RETURN_IF_ERROR(Persist(e, std::move(next)));
  } else {
    *e.job.mutable_last_metrics() = m;
  }
  for (JobListener* l : listeners_) l->OnJobMetrics(e.job, m);
  return OkStatus();
}

}  // namespace moe::controller
