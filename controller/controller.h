// The controller's logic, without transport: jobs, workers, scheduling, failures, rendezvous,
// metrics. The gRPC layer (grpc_server.cc) and the tests call it directly. Thread-safe: one mutex
// serialises every entry point; nothing in here blocks on the network.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "controller/clock.h"
#include "controller/job_manager.h"
#include "controller/metrics_aggregator.h"
#include "controller/rendezvous.h"
#include "controller/state_store.h"
#include "controller/worker_registry.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

struct ControllerOptions {
  double lease_seconds = 5.0;       // a worker silent for this long is lost
  double heartbeat_seconds = 1.0;   // what workers are told to send
  double reconnect_grace_seconds = 10.0;  // after a restart, how long running ranks get to report back
  std::string checkpoint_root;      // checkpoints of jobs that name no directory: <root>/<job id>
};

class Controller {
 public:
  Controller(StateStore& store, Clock& clock, MetricsAggregator& metrics, const ControllerOptions& options);

  // Loads stored jobs; running ones wait for their workers to report back.
  Status Recover() ABSL_LOCKS_EXCLUDED(mu_);

  // JobService.
  StatusOr<moe::v1::Job> Submit(const moe::v1::TrainingJob& job) ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Job> Get(const std::string& id, bool with_events) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Job> List(const std::vector<moe::v1::JobState>& states) ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Job> Cancel(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<int64_t> Watch(const std::string& id, WatchFn fn) ABSL_LOCKS_EXCLUDED(mu_);
  void Unwatch(int64_t subscription) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<moe::v1::Worker> Workers() ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<moe::v1::Worker> SetDrained(const std::string& name, bool drained) ABSL_LOCKS_EXCLUDED(mu_);

  // WorkerService: a worker's stream. Register first; then its messages; then Disconnected.
  StatusOr<moe::v1::Registered> Register(const moe::v1::Register& reg, WorkerChannel* channel) ABSL_LOCKS_EXCLUDED(mu_);
  void OnWorkerMessage(const std::string& worker, const moe::v1::WorkerMessage& msg) ABSL_LOCKS_EXCLUDED(mu_);
  void Disconnected(const std::string& worker, WorkerChannel* channel) ABSL_LOCKS_EXCLUDED(mu_);
  RendezvousStore& rendezvous() { return rendezvous_; }

  // Leases, reconnect deadlines, rendezvous timeouts and a scheduling pass. Call about every 100 ms.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // For tests and metrics: queue length and scheduler decision time.
  size_t QueueLength() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Schedule() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAttempt(JobEntry& e, const std::vector<Slot>& slots) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the running attempt because of `reason`; restarts the job or fails it.
  void FailAttempt(JobEntry& e, const std::string& reason, bool permanent = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopRanks(JobEntry& e, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RankFinished(JobEntry& e, int rank, const moe::v1::RankFinished& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleFinished(const std::string& worker, const moe::v1::RankFinished& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLost(const std::string& name, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorkersOf(JobEntry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobEntry* AttemptOf(const std::string& job_id, int attempt, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RendezvousPrefix(const std::string& job_id, int attempt) const;
  void SendTo(const std::string& worker, const moe::v1::ControllerMessage& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  StateStore& store_;
  Clock& clock_;
  MetricsAggregator& metrics_;
  ControllerOptions options_;
  JobManager jobs_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  RendezvousStore rendezvous_;  // has its own lock
  bool schedule_needed_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace moe::controller
