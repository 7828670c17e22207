// Turns the ranks' step reports into job metrics (TFLOP/s per device by Megatron's formula, MFU,
// tokens/s, ETA), flags stragglers, and exposes everything to Prometheus.
//
// Straggler: in synchronous training every rank's wall step time is the same (the fast ones wait in
// collectives), so a slow rank shows in its own work: forward + backward time (compute_seconds). A
// rank whose compute time stays above the job's median by more than `margin` for `window`
// consecutive steps is flagged; it is unflagged after `window` steps back within the margin.
//
// Job states, restarts and attempts arrive as JobManager events (a JobListener); step reports and
// the cluster view from the Controller. Not thread-safe: every call comes under the Controller's
// mutex (prometheus-cpp's collection on the exposer's thread has its own locks).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/clock.h"
#include "controller/config.h"
#include "controller/job_listener.h"
#include "controller/worker_registry.h"
#include "moe/v1/job.pb.h"
#include "moe/v1/job_service.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace moe::controller {

struct RankInfo {
  std::string rack;
  std::string worker;
  std::string node;    // the host (joins with DCGM's Hostname)
  std::string device;  // cpu, cuda:N (DCGM's gpu is N)
};

struct StragglerChange {
  int rank = 0;
  bool flagged = false;
  double ratio = 0;  // the rank's compute time / median
};

class MetricsAggregator final : public JobListener {
 public:
  MetricsAggregator(std::shared_ptr<prometheus::Registry> registry, Clock& clock,
                    StragglerOptions straggler, double retention_seconds,
                    const std::string& version);
  ~MetricsAggregator() override;

  // JobListener: the job's state series; a restart; a new attempt (SCHEDULED, or a job loaded while
  // its attempt runs) starts the per-rank series from the job's placement.
  void OnJobStateChanged(const moe::v1::Job& job, moe::v1::JobState from) override;
  // A deleted job's series go at once (not after the retention).
  void OnJobDeleted(const std::string& job_id) override;
  // The queue of jobs that name none (moe_job_info's and the queue series' `queue`).
  void SetDefaultQueue(std::string queue) { default_queue_ = std::move(queue); }
  // moe_queue_wait_slo_seconds{queue}: the queues whose configuration sets wait_slo_seconds.
  void SetWaitSlos(const std::map<std::string, double>& slo_by_queue);
  // moe_queue_waiting_jobs{queue, reason} and moe_queue_oldest_wait_seconds{queue, reason}: the
  // queued jobs by why the last scheduling pass left them waiting (WaitClassName); every reason of
  // every queue known is exported, 0 when none. `now`: Unix seconds.
  struct WaitingJob {
    std::string job_id;
    const char* reason = "";
  };
  void SetWaiting(const std::vector<WaitingJob>& waiting, double now);

  // A new attempt: which rank runs where.
  void StartAttempt(const std::string& job_id, int attempt, const std::vector<RankInfo>& ranks,
                    int64_t world_size);
  // A rank's step. When every rank has reported this step, returns the job-level metrics (rank 0's
  // figures, every rank's times, stragglers), and any straggler flag changes in `changes`.
  std::optional<moe::v1::StepMetrics> OnStep(const std::string& job_id, int attempt, int rank,
                                             const moe::v1::StepMetrics& m,
                                             std::vector<StragglerChange>* changes);
  // Cluster view.
  void SetWorkers(const std::vector<moe::v1::Worker>& workers);
  // moe_workers{state, rack}: per rack, never per worker (a series per device would grow /metrics
  // with the cluster: 131,072 devices); the registry counts them (CountByStateAndRack).
  void SetWorkerCounts(std::map<std::pair<std::string, std::string>, int> counts);
  // moe_rack_spares{rack} and moe_rack_spares_in_use{rack} (--spares-per-rack > 0 only): a rack
  // that is no longer counted goes to 0, as moe_workers does.
  void SetRackSpares(const std::map<std::string, RackCount>& racks);
  // Goodput (controller/goodput.h): the job's ratio and lost seconds by cause (counters, moved by
  // what the account added since the last call), and the cluster's over the jobs shown.
  void SetGoodput(const std::string& job_id, const moe::v1::Goodput& g);
  void SetGoodputFloor(double floor);
  void SetQueueLength(size_t n);
  // moe_job_checkpoint_step and moe_job_checkpoint_age_seconds (now, Unix seconds, minus
  // Job.checkpoint_time) of a job with series; refreshed once a second for the live jobs.
  void SetCheckpoint(const moe::v1::Job& job, double now);
  // moe_queue_{quota,usage,borrowed}{queue,device} and moe_queue_pending_jobs{queue}: the figures
  // ListQueues (moectl get queues) shows, from QueueScheduler::Queues(). A device a queue no longer
  // uses goes to 0; the unlimited default queue (no --queues file) has no quota series.
  void SetQueues(const std::vector<moe::v1::QueueStatus>& queues);
  void SetRendezvousKeys(size_t n);
  // The one writer's totals and the controller's stalls so far (counters follow them).
  void SetStore(int64_t batches, int64_t writes, double stalled_seconds);
  // The registration gate's refusals so far and the seconds of slots it has handed out ahead.
  void SetRegistrationGate(int64_t refused, double backlog_seconds);
  void ObserveSchedulerDecision(double seconds);
  // Drops the series of jobs that ended more than the retention time ago.
  void Expire();
  std::set<int> Stragglers(const std::string& job_id) const;

 private:
  struct JobSeries;
  static std::map<std::string, std::string> RankLabels(const JobSeries& s, size_t r);
  JobSeries& Series(const std::string& job_id);
  void SetState(const std::string& job_id, moe::v1::JobState state);
  void UpdateStragglers(JobSeries& s, const std::vector<double>& compute,
                        std::vector<StragglerChange>* changes);
  void ExportJobStep(JobSeries& s, const moe::v1::StepMetrics& out);
  // keep_last_step: moe_rank_step_duration_seconds and moe_rank_compute_seconds stay (a job that
  // ended keeps them for the retention, as its loss).
  void RemoveRankSeries(const JobSeries& s, bool keep_last_step = false);
  // A job that stopped running (preempted, restarting, stopping, ended): its throughput gauges go.
  void DropThroughput(const JobSeries& s);
  void SetInfo(JobSeries& s, const moe::v1::Job& job);
  void TrackQueueing(JobSeries& s, const moe::v1::Job& job, moe::v1::JobState from);
  void RegisterQueueWaits(prometheus::Registry& r);
  void RegisterRankSeries(prometheus::Registry& r);
  void DropSeries(const std::string& job_id);
  void RegisterGoodput(prometheus::Registry& r);
  void RegisterCheckpointsAndQueues(prometheus::Registry& r);
  void CountFinished(moe::v1::JobState state);

  std::shared_ptr<prometheus::Registry> registry_;
  Clock& clock_;
  StragglerOptions straggler_;
  double retention_;
  prometheus::Family<prometheus::Counter>* flops_;
  prometheus::Family<prometheus::Gauge>* tflops_;
  prometheus::Family<prometheus::Gauge>* mfu_;
  prometheus::Family<prometheus::Gauge>* peak_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Histogram>* step_duration_;
  prometheus::Family<prometheus::Gauge>* loss_;
  prometheus::Family<prometheus::Gauge>* mtp_loss_;
  prometheus::Family<prometheus::Gauge>* grad_norm_;
  prometheus::Family<prometheus::Gauge>* bubble_;
  prometheus::Family<prometheus::Gauge>* eval_loss_;
  prometheus::Family<prometheus::Gauge>* eval_ppl_;
  prometheus::Family<prometheus::Gauge>* eval_mtp_loss_;
  prometheus::Family<prometheus::Gauge>* memory_peak_;
  prometheus::Family<prometheus::Gauge>* lr_;
  prometheus::Family<prometheus::Gauge>* last_step_;  // measured
  prometheus::Family<prometheus::Gauge>*
      planned_step_;  // the planner's, for the attempt's placement
  prometheus::Family<prometheus::Counter>* a2a_;
  prometheus::Family<prometheus::Counter>* compute_;
  prometheus::Family<prometheus::Gauge>* imbalance_;
  prometheus::Family<prometheus::Gauge>* state_;
  prometheus::Family<prometheus::Counter>* restarts_;
  prometheus::Family<prometheus::Gauge>* rank_step_;
  prometheus::Family<prometheus::Gauge>* rank_compute_;
  prometheus::Family<prometheus::Gauge>* rank_tflops_;
  prometheus::Family<prometheus::Gauge>* straggler_gauge_;
  prometheus::Family<prometheus::Gauge>* step_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Gauge>* queue_;
  prometheus::Family<prometheus::Gauge>* rendezvous_keys_;
  prometheus::Family<prometheus::Gauge>* goodput_;
  prometheus::Family<prometheus::Counter>* lost_;
  prometheus::Family<prometheus::Counter>* cluster_lost_;
  prometheus::Gauge* cluster_goodput_ = nullptr;
  prometheus::Gauge* goodput_floor_ = nullptr;
  double productive_sum_ = 0, wall_sum_ = 0;  // goodput over the jobs with series
  prometheus::Counter* store_batches_;
  prometheus::Counter* store_writes_;
  prometheus::Counter* stalled_;
  prometheus::Counter* registrations_refused_;
  prometheus::Gauge* registration_backlog_;
  prometheus::Family<prometheus::Histogram>* decision_;
  std::map<std::string, std::unique_ptr<JobSeries>> jobs_;
  std::set<std::pair<std::string, std::string>> worker_series_;  // (state, rack) seen
  prometheus::Family<prometheus::Gauge>* checkpoint_step_;
  prometheus::Family<prometheus::Gauge>* checkpoint_age_;
  prometheus::Family<prometheus::Gauge>* checkpoint_save_;
  prometheus::Family<prometheus::Gauge>* queue_quota_;
  prometheus::Family<prometheus::Gauge>* queue_usage_;
  prometheus::Family<prometheus::Gauge>* queue_borrowed_;
  prometheus::Family<prometheus::Gauge>* queue_pending_;
  std::set<std::pair<std::string, std::string>> queue_series_;  // (queue, device) seen
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Gauge>* rack_spares_;
  prometheus::Family<prometheus::Gauge>* rack_spares_in_use_;
  std::set<std::string> spare_racks_;  // racks with spares series
  prometheus::Family<prometheus::Gauge>* job_info_;
  prometheus::Family<prometheus::Gauge>* rank_flops_;        // FLOP/s (base units)
  prometheus::Family<prometheus::Gauge>* job_device_flops_;  // FLOP/s per device
  prometheus::Family<prometheus::Histogram>* admission_wait_;
  prometheus::Family<prometheus::Gauge>* waiting_jobs_;
  prometheus::Family<prometheus::Gauge>* oldest_wait_;
  prometheus::Family<prometheus::Gauge>* wait_slo_;
  std::string default_queue_ = "default";
  std::set<std::string> known_queues_;  // queues with waiting series
};

}  // namespace moe::controller
