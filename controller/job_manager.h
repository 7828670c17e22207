// Jobs: records, the state machine, events (stored, streamed) and watchers.
// Not thread-safe: the Controller serialises calls under its mutex.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "controller/clock.h"
#include "controller/scheduler.h"
#include "controller/state_store.h"
#include "moe/v1/job_service.pb.h"

namespace moe::controller {

// PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, with RESTARTING between attempts.
bool ValidTransition(moe::v1::JobState from, moe::v1::JobState to);
bool IsTerminal(moe::v1::JobState s);

struct RankStatus {
  std::string worker;
  bool started = false;
  bool finished = false;
  bool ok = false;
  int64_t last_step = 0;
  double last_step_seconds = 0;
  moe::v1::StepMetrics last_metrics;
};

// The attempt now running or ending.
struct Attempt {
  int number = 0;
  std::vector<Slot> slots;         // rank order
  std::vector<RankStatus> ranks;
  bool ending = false;             // cancel sent; waiting for ranks to stop
  double reconnect_deadline = 0;   // after a controller restart: monotonic time by which ranks must report
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
  double last_persist = 0;
};

using WatchFn = std::function<void(const moe::v1::WatchJobResponse&)>;

class JobManager {
 public:
  JobManager(StateStore& store, Clock& clock) : store_(store), clock_(clock) {}

  // Loads the jobs stored by an earlier run of the controller.
  Status Load();
  // Stores a new PENDING job and its "Submitted" event.
  StatusOr<JobEntry*> Create(const moe::v1::TrainingJob& expanded, const JobSpec& spec);
  JobEntry* Find(const std::string& id);
  std::vector<JobEntry*> All();

  // Moves a job to `to`, records and streams the event, stores the job.
  Status Transition(JobEntry& e, moe::v1::JobState to, const std::string& type, const std::string& message);
  // An event that does not change the state.
  void Event(JobEntry& e, const std::string& type, const std::string& message);
  // Stores the job record (placement, metrics); `force` skips the rate limit for metrics-only changes.
  void Persist(JobEntry& e, bool force = true);
  void PublishMetrics(JobEntry& e, const moe::v1::StepMetrics& m);

  StatusOr<std::vector<moe::v1::JobEvent>> Events(const std::string& id) { return store_.LoadEvents(id); }
  // Sends the job's snapshot and its past events, then every new event and metric until it ends.
  // Returns a subscription id (0 when the job had already ended: everything was sent).
  int64_t Watch(JobEntry& e, WatchFn fn);
  void Unwatch(int64_t subscription);

 private:
  void Notify(const JobEntry& e, const moe::v1::WatchJobResponse& r);
  void EndWatches(const JobEntry& e);

  StateStore& store_;
  Clock& clock_;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  std::map<std::string, int64_t> next_seq_;
  struct Watcher {
    std::string job_id;
    WatchFn fn;
  };
  std::map<int64_t, Watcher> watchers_;
  int64_t next_watch_ = 1;
};

}  // namespace moe::controller
