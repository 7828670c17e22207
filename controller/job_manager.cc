#include "controller/job_manager.h"

#include <random>

#include "common/job_spec_proto.h"
#include "common/log.h"

namespace moe::controller {

using moe::v1::JobState;

bool IsTerminal(JobState s) { return s == moe::v1::SUCCEEDED || s == moe::v1::FAILED || s == moe::v1::CANCELLED; }

bool ValidTransition(JobState from, JobState to) {
  using namespace moe::v1;
  if (IsTerminal(from) || from == to) return false;
  switch (from) {
    case PENDING: return to == SCHEDULED || to == CANCELLED || to == FAILED;
    case SCHEDULED: return to == RUNNING || to == RESTARTING || to == FAILED || to == CANCELLED || to == SUCCEEDED;
    case RUNNING: return to == SUCCEEDED || to == FAILED || to == CANCELLED || to == RESTARTING;
    case RESTARTING: return to == SCHEDULED || to == FAILED || to == CANCELLED;
    default: return false;
  }
}

Status JobManager::Load() {
  MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::Job> jobs, store_.LoadJobs());
  for (auto& j : jobs) {
    auto e = std::make_unique<JobEntry>();
    auto spec = SpecFromProto(j.spec());
    if (!spec.ok()) {
      MOE_LOG(ERROR) << "stored job " << j.id() << " has a spec this controller cannot read: " << spec.status();
      continue;
    }
    e->spec = *spec;
    e->job = std::move(j);
    MOE_ASSIGN_OR_RETURN(std::vector<moe::v1::JobEvent> events, store_.LoadEvents(e->job.id()));
    next_seq_[e->job.id()] = events.empty() ? 1 : events.back().seq() + 1;
    jobs_[e->job.id()] = std::move(e);
  }
  return OkStatus();
}

namespace {
std::string NewId(const std::string& name) {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::string suffix;
  for (int i = 0; i < 5; ++i) suffix += kAlphabet[rng() % 27];
  return name + "-" + suffix;
}
}  // namespace

StatusOr<JobEntry*> JobManager::Create(const moe::v1::TrainingJob& expanded, const JobSpec& spec) {
  auto e = std::make_unique<JobEntry>();
  std::string id;
  do {
    id = NewId(spec.name);
  } while (jobs_.count(id));
  e->job.set_id(id);
  *e->job.mutable_spec() = expanded;
  e->job.set_state(moe::v1::PENDING);
  e->job.set_created_at(clock_.Now());
  e->job.set_updated_at(clock_.Now());
  e->spec = spec;
  MOE_RETURN_IF_ERROR(store_.PutJob(e->job));
  JobEntry* raw = e.get();
  jobs_[id] = std::move(e);
  next_seq_[id] = 1;
  Event(*raw, "Submitted", "priority " + std::to_string(spec.priority) + ", " + std::to_string(spec.parallelism.world_size) +
                               " ranks (EP " + std::to_string(spec.parallelism.expert_parallel) + ", groups within one " +
                               spec.placement.expert_group_within + ")");
  return raw;
}

JobEntry* JobManager::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

std::vector<JobEntry*> JobManager::All() {
  std::vector<JobEntry*> out;
  for (auto& [id, e] : jobs_) out.push_back(e.get());
  return out;
}

Status JobManager::Transition(JobEntry& e, JobState to, const std::string& type, const std::string& message) {
  const JobState from = e.job.state();
  if (!ValidTransition(from, to)) {
    return FailedPreconditionError("job " + e.job.id() + " cannot go from " + moe::v1::JobState_Name(from) + " to " +
                                   moe::v1::JobState_Name(to));
  }
  e.job.set_state(to);
  e.job.set_message(message);
  e.job.set_updated_at(clock_.Now());
  Persist(e);
  Event(e, type, message);
  MOE_LOG(INFO) << "job " << e.job.id() << ": " << moe::v1::JobState_Name(from) << " -> " << moe::v1::JobState_Name(to)
                << (message.empty() ? "" : " (" + message + ")");
  if (IsTerminal(to)) EndWatches(e);
  return OkStatus();
}

void JobManager::Event(JobEntry& e, const std::string& type, const std::string& message) {
  moe::v1::JobEvent ev;
  ev.set_job_id(e.job.id());
  ev.set_seq(next_seq_[e.job.id()]++);
  ev.set_time(clock_.Now());
  ev.set_type(type);
  ev.set_state(e.job.state());
  ev.set_message(message);
  ev.set_attempt(e.job.attempt());
  if (Status st = store_.AppendEvent(ev); !st.ok()) MOE_LOG(ERROR) << "storing an event of " << e.job.id() << ": " << st;
  moe::v1::WatchJobResponse r;
  *r.mutable_event() = ev;
  Notify(e, r);
}

void JobManager::Persist(JobEntry& e, bool force) {
  const double now = clock_.Monotonic();
  if (!force && now - e.last_persist < 5.0) return;
  e.last_persist = now;
  if (Status st = store_.PutJob(e.job); !st.ok()) MOE_LOG(ERROR) << "storing job " << e.job.id() << ": " << st;
}

void JobManager::PublishMetrics(JobEntry& e, const moe::v1::StepMetrics& m) {
  *e.job.mutable_last_metrics() = m;
  Persist(e, /*force=*/false);
  moe::v1::WatchJobResponse r;
  *r.mutable_metrics() = m;
  Notify(e, r);
}

int64_t JobManager::Watch(JobEntry& e, WatchFn fn) {
  moe::v1::WatchJobResponse snap;
  *snap.mutable_job() = e.job;
  fn(snap);
  auto events = store_.LoadEvents(e.job.id());
  if (events.ok()) {
    for (const auto& ev : *events) {
      moe::v1::WatchJobResponse r;
      *r.mutable_event() = ev;
      fn(r);
    }
  }
  if (IsTerminal(e.job.state())) {
    fn(snap);  // the final snapshot: the stream ends with it
    return 0;
  }
  const int64_t id = next_watch_++;
  watchers_[id] = {e.job.id(), std::move(fn)};
  return id;
}

void JobManager::Unwatch(int64_t subscription) { watchers_.erase(subscription); }

void JobManager::Notify(const JobEntry& e, const moe::v1::WatchJobResponse& r) {
  for (auto& [id, w] : watchers_) if (w.job_id == e.job.id()) w.fn(r);
}

void JobManager::EndWatches(const JobEntry& e) {
  moe::v1::WatchJobResponse snap;
  *snap.mutable_job() = e.job;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->second.job_id == e.job.id()) {
      it->second.fn(snap);
      it = watchers_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace moe::controller
