// The attempt lifecycle: a queued job is placed (Start), its ranks run and report (RankStarted,
// Step), and the attempt ends when every rank has finished (settled): SUCCEEDED when all did well,
// else the recorded failure decides (RESTARTING, then placed again, PREEMPTED, or FAILED). A
// failure (a rank's, a lost worker's) stops the other ranks at once, whether or not the store takes
// its record yet; what the store refused is recorded again from the Controller's Tick
// (SettleOrRetry).
//
// Not thread-safe: the Controller calls it under its mutex, with the managers it was built on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/clock.h"
#include "controller/config.h"
#include "controller/job_manager.h"
#include "controller/metrics_aggregator.h"
#include "controller/registration_gate.h"
#include "controller/rendezvous.h"
#include "controller/worker_registry.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

class AttemptLifecycle {
 public:
  AttemptLifecycle(JobManager& jobs, WorkerRegistry& workers, RendezvousStore& rendezvous,
                   MetricsAggregator& metrics, Clock& clock, const ControllerConfig& config)
      : jobs_(jobs),
        workers_(workers),
        rendezvous_(rendezvous),
        metrics_(metrics),
        clock_(clock),
        config_(config) {}

  // A new attempt on `slots` (rank order): stored as SCHEDULED first, then its workers are told.
  Status Start(JobEntry& e, const std::vector<Slot>& slots);
  // Several new attempts (a scheduling pass's placements, each job once): stored in one write, all
  // or none (a refused write leaves every one queued), then their workers are told.
  struct Placement {
    JobEntry* e;
    std::vector<Slot> slots;
  };
  Status StartAll(const std::vector<Placement>& starts);
  // A job that was running when the controller stopped: its ranks get the reconnect grace to report
  // back on their reconnecting workers (checked by CheckDeadlines).
  Status AwaitReconnect(JobEntry& e);
  // The registration gate whose herd the reconnect grace waits for (CheckReconnect): the grace runs
  // from the gate's QuietSince, when every agent it told to come back is due.
  void WatchHerd(const RegistrationGate* gate) { herd_ = gate; }
  // Stops the running attempt for `reason`: its ranks stop (at their next step boundary, where they
  // checkpoint), the outcome is recorded as `cause` says, and the attempt ends once no rank runs.
  void Stop(JobEntry& e, const std::string& reason, StopCause cause = StopCause::kFailure);
  // Tells every live rank of the attempt to stop: at its next step boundary, checkpointing there,
  // or killed at once (`now`).
  void StopRanks(JobEntry& e, const std::string& reason, bool now = false);
  // A graceful stop that ends the job in `final_state` (CANCELLED, TIMEOUT): stored as STOPPING
  // first (a refused record changes nothing), then the ranks are told; once every rank ended the
  // job takes `final_state` with the checkpoint the ranks wrote as they stopped.
  Status BeginStop(JobEntry& e, moe::v1::JobState final_state, const std::string& reason);

  // What a worker reports about its rank (the stream's identity checked by the Controller).
  void RankStarted(const std::string& job_id, int attempt, int rank);
  void RankFinished(const std::string& worker, const moe::v1::RankFinished& f);
  void Step(const moe::v1::StepReport& s);
  // A worker is gone (lease, closed stream) or came back without its rank.
  void WorkerLost(const std::string& name, const std::string& why);
  void RankLost(const std::string& worker, const std::string& why);

  // Records what the store refused earlier and ends the attempt once no rank runs.
  void SettleOrRetry(JobEntry& e);
  // The reconnect grace after a restart, the deadline by which every assigned rank must start, and
  // the job's spec.time_limit.
  void CheckDeadlines(JobEntry& e, double now);
  // The job whose running attempt `attempt` has a rank `rank`; null for a stale or unknown one.
  JobEntry* AttemptOf(const std::string& job_id, int attempt, int rank);

  // The controller's fencing epoch, carried in every assignment (workers refuse a lower one).
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }

  // Whether something changed that a scheduling pass should see (a worker freed, a job requeued).
  void NeedSchedule() { schedule_needed_ = true; }
  bool TakeScheduleNeeded() {
    const bool was = schedule_needed_;
    schedule_needed_ = false;
    return was;
  }

 private:
  // A placement's SCHEDULED record (attempt, placement, plan), to be stored; Started then makes
  // the attempt in memory and tells its workers.
  JobManager::TransitionRequest StartRequest(JobEntry& e, const std::vector<Slot>& slots);
  void Started(JobEntry& e, const std::vector<Slot>& slots);
  void SendAssignments(const JobEntry& e);
  Status Settle(JobEntry& e);
  Status RecordFailure(JobEntry& e);
  void RankEnded(JobEntry& e, int rank, const moe::v1::RankFinished& f);
  // A success the job's record does not bear out, as a transient failure saying why.
  moe::v1::RankFinished Doubted(const JobEntry& e, const moe::v1::RankFinished& f);
  void SettlePendingOk(JobEntry& e, double now);
  // How long a success waits for the last step's report from another rank's agent.
  static constexpr double kPendingOkSeconds = 30;
  void RecordStraggler(JobEntry& e, const StragglerChange& c);
  void CheckReconnect(JobEntry& e, double now);
  void CheckRankStarts(JobEntry& e, double now);
  void CheckTimeLimit(JobEntry& e);
  Status SettleStopped(JobEntry& e);  // a STOPPING job whose ranks all ended
  double RestartDelay(int n) const;   // the wait before a job's n-th restart
  std::string ResumePoint(
      const JobEntry& e) const;  // "it resumes from the checkpoint of step 100", ...

  JobManager& jobs_;
  WorkerRegistry& workers_;
  RendezvousStore& rendezvous_;
  MetricsAggregator& metrics_;
  Clock& clock_;
  const RegistrationGate* herd_ = nullptr;  // see WatchHerd
  const ControllerConfig& config_;
  bool schedule_needed_ = true;
  int64_t epoch_ = 0;
};

}  // namespace moe::controller
