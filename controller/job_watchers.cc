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
  by_job_[job.id()][id] = std::move(fn);
  job_of_[id] = job.id();
  return id;
}

void JobWatchers::Unwatch(int64_t subscription) {
  auto it = job_of_.find(subscription);
  if (it == job_of_.end()) return;
  if (auto w = by_job_.find(it->second); w != by_job_.end()) {
    w->second.erase(subscription);
    if (w->second.empty()) by_job_.erase(w);
  }
  job_of_.erase(it);
}

std::map<int64_t, WatchFn>* JobWatchers::Of(const std::string& job_id) {
  auto it = by_job_.find(job_id);
  return it == by_job_.end() ? nullptr : &it->second;
}

void JobWatchers::OnJobEventRecorded(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  auto* watchers = Of(job.id());
  if (watchers == nullptr) return;
  moe::v1::WatchJobResponse r;
  *r.mutable_event() = event;
  for (auto& [id, fn] : *watchers) fn(r);
}

void JobWatchers::OnJobMetrics(const moe::v1::Job& job, const moe::v1::StepMetrics& metrics) {
  auto* watchers = Of(job.id());
  if (watchers == nullptr) return;
  moe::v1::WatchJobResponse r;
  *r.mutable_metrics() = metrics;
  for (auto& [id, fn] : *watchers) fn(r);
}

void JobWatchers::OnJobStateChanged(const moe::v1::Job& job, moe::v1::JobState /*from*/) {
  if (!IsTerminal(job.state())) return;
  auto it = by_job_.find(job.id());
  if (it == by_job_.end()) return;
  moe::v1::WatchJobResponse snap;
  *snap.mutable_job() = job;
  for (auto& [id, fn] : it->second) {
    fn(snap);
    job_of_.erase(id);
  }
  by_job_.erase(it);
}

}  // namespace moe::controller
