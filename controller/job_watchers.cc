#include "controller/job_watchers.h"

#include "controller/job_manager.h"

namespace moe::controller {

int64_t JobWatchers::Watch(const moe::v1::Job& job, const std::vector<moe::v1::JobEvent>& past,
                           WatchFn fn) {
  moe::v1::WatchJobResponse snap;
  *snap.mutable_job() = job;
  fn(snap);
  for (const auto& ev : past) {
    moe::v1::WatchJobResponse r;
    *r.mutable_event() = ev;
    fn(r);
  }
  if (IsTerminal(job.state())) {
    fn(snap);  // the final snapshot: the stream ends with it
    return 0;
  }
  const int64_t id = next_++;
  watchers_[id] = {job.id(), std::move(fn)};
  return id;
}

void JobWatchers::Unwatch(int64_t subscription) { watchers_.erase(subscription); }

void JobWatchers::Send(const std::string& job_id, const moe::v1::WatchJobResponse& r) {
  for (auto& [id, w] : watchers_) {
    if (w.job_id == job_id) w.fn(r);
  }
}

void JobWatchers::OnJobEventRecorded(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  moe::v1::WatchJobResponse r;
  *r.mutable_event() = event;
  Send(job.id(), r);
}

void JobWatchers::OnJobMetrics(const moe::v1::Job& job, const moe::v1::StepMetrics& metrics) {
  moe::v1::WatchJobResponse r;
  *r.mutable_metrics() = metrics;
  Send(job.id(), r);
}

void JobWatchers::OnJobStateChanged(const moe::v1::Job& job, moe::v1::JobState /*from*/) {
  if (!IsTerminal(job.state())) return;
  moe::v1::WatchJobResponse snap;
  *snap.mutable_job() = job;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->second.job_id == job.id()) {
      it->second.fn(snap);
      it = watchers_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace moe::controller
