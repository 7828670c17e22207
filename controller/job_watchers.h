// The watch streams of jobs (WatchJob). A watcher gets the job's snapshot and its past events, then
// every new event and step metrics, then the final snapshot when the job ends, which closes it.
// Subscribes to the JobManager as a listener.
//
// Not thread-safe: the Controller calls it under its mutex, where the listener calls arrive too. A
// WatchFn runs there as well, so it must only queue the message (the gRPC stream writes it later).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "controller/job_listener.h"
#include "moe/v1/job_service.pb.h"

namespace moe::controller {

using WatchFn = std::function<void(const moe::v1::WatchJobResponse&)>;

class JobWatchers final : public JobListener {
 public:
  // Sends the snapshot and `past` events. Returns the subscription (0 when the job had already
  // ended: the final snapshot was sent too and nothing more follows).
  int64_t Watch(const moe::v1::Job& job, const std::vector<moe::v1::JobEvent>& past, WatchFn fn);
  void Unwatch(int64_t subscription);
  size_t size() const { return job_of_.size(); }

  void OnJobStateChanged(const moe::v1::Job& job, moe::v1::JobState from) override;
  void OnJobEventRecorded(const moe::v1::Job& job, const moe::v1::JobEvent& event) override;
  void OnJobMetrics(const moe::v1::Job& job, const moe::v1::StepMetrics& metrics) override;

 private:
  // The job's watchers, by subscription; nullptr when it has none (no message is built then: a
  // step report of a job nobody watches costs a lookup).
  std::map<int64_t, WatchFn>* Of(const std::string& job_id);

  std::map<std::string, std::map<int64_t, WatchFn>> by_job_;
  std::map<int64_t, std::string> job_of_;  // subscription -> job id
  int64_t next_ = 1;
};

}  // namespace moe::controller
