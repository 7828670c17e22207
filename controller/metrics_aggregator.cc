#include "controller/metrics_aggregator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "controller/goodput.h"
#include "controller/job_manager.h"

namespace moe::controller {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

struct MetricsAggregator::JobSeries {
  std::string id;
  int attempt = 0;
  int64_t world = 0;
  std::vector<RankInfo> ranks;
  // Per step number: the reports received so far (by rank).
  std::map<int64_t, std::map<int, moe::v1::StepMetrics>> pending;
  std::vector<int> over, under;  // consecutive steps above / within the margin
  std::set<int> stragglers;
  std::deque<double> recent_step_seconds;  // for the ETA
  double ended_at = 0;
  std::set<std::string> layers;        // imbalance series created
  int restarts = -1;                   // the job's restart count last seen (-1: none yet)
  std::map<std::string, double> lost;  // goodput: seconds by cause already on the counters
  double productive = 0, wall = 0;     // goodput as last published
  bool running = false;                // SCHEDULED or RUNNING: its throughput is exported
  // Its throughput series exist (a step exported them, DropThroughput not yet): a job that never
  // ran has none to remove at each change of state (four label lookups each, at every submit).
  mutable bool throughput = false;
  std::string queue;                        // metadata.queue, or the default queue
  std::map<std::string, std::string> info;  // moe_job_info's labels (empty: no series yet)
  double queued_since = -1;                 // Unix seconds it entered its queue (-1: not queued)
  // moe_job_state's series of the job, by state number (empty until its first state): looked up
  // once, not by their labels at every change (ten label sets hashed per change of every job).
  std::vector<prometheus::Gauge*> state_gauges;
  // moe_rank_step_duration_seconds and moe_rank_compute_seconds of each rank, looked up at its
  // first report (every report of every rank set them by six labels before); cleared with them.
  mutable std::vector<std::pair<prometheus::Gauge*, prometheus::Gauge*>> rank_times;
  // The job's series a completed step sets that only DropSeries removes (JobMetric), by family:
  // twenty label lookups per completed step of every job were a tenth of the tick.
  std::unordered_map<const void*, void*> step_series;
};

namespace {

prometheus::Family<prometheus::Counter>* AddCounter(prometheus::Registry& r, const char* name,
                                                    const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>* AddGauge(prometheus::Registry& r, const char* name,
                                                const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Histogram>* AddHistogram(prometheus::Registry& r, const char* name,
                                                        const char* help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

// The states a job ends in: JobManager's terminal states (a final state added there, such as a time
// limit's, is counted here too) but INVALID, which no transition reaches (it is only loaded).
bool IsFinal(moe::v1::JobState s) { return IsTerminal(s) && s != moe::v1::INVALID; }

// A step's wall time from a toy's 10 ms to a 671B step's minutes (70-250 s at the published sizes)
// and a stalled one's hour and more: every quantile panel resolves at both ends.

// A queued job's wait, from a second to a day.
prometheus::Histogram::BucketBoundaries AdmissionBuckets() {
  return {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400};
}

prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,    2.5,  5,    10,   30,
          60,   120,   180,  300, 600,  900, 1800, 3600, 7200, 14400};
}

}  // namespace

// Every per-rank series: the job, the rank, and where it runs (rack; node, worker and device, which
// join with DCGM's Hostname and gpu and with node exporters).
std::map<std::string, std::string> MetricsAggregator::RankLabels(const JobSeries& s, size_t r) {
  const RankInfo& at = s.ranks[r];
  return {{"job_id", s.id},  {"rank", std::to_string(r)}, {"rack", at.rack},
          {"node", at.node}, {"worker", at.worker},       {"device", at.device}};
}

MetricsAggregator::MetricsAggregator(std::shared_ptr<prometheus::Registry> registry, Clock& clock,
                                     StragglerOptions straggler, double retention_seconds,
                                     const std::string& version)
    : registry_(std::move(registry)),
      clock_(clock),
      straggler_(straggler),
      retention_(retention_seconds) {
  auto& r = *registry_;
  flops_ = AddCounter(r, "moe_job_model_flops_total",
                      "Model FLOPs done by the job (Megatron's formula), all devices");
  tflops_ = AddGauge(r, "moe_job_tflops_per_device",
                     "Model TFLOP/s per device over the last step (Megatron's formula)");
  mfu_ = AddGauge(r, "moe_job_mfu_ratio",
                  "Model FLOPs utilisation: achieved / peak per device (0..1)");
  peak_ = AddGauge(r, "moe_job_peak_tflops_per_device",
                   "The peak TFLOP/s per device that MFU is measured against (the device's dense "
                   "bf16 peak, or the CPU's measured SGEMM peak)");
  tokens_ = AddCounter(r, "moe_job_tokens_total", "Tokens trained on");
  step_duration_ = AddHistogram(r, "moe_job_step_duration_seconds", "Wall time of a training step");
  loss_ = AddGauge(r, "moe_job_loss", "Mean cross-entropy of the last step (nats per token)");
  mtp_loss_ = AddGauge(r, "moe_job_mtp_loss",
                       "Multi-token prediction loss of the last step: mean over depths of each "
                       "depth's cross-entropy (nats per token); only for jobs that train MTP");
  grad_norm_ = AddGauge(r, "moe_job_grad_norm", "Global gradient L2 norm before clipping");
  bubble_ = AddGauge(
      r, "moe_job_pipeline_bubble_ratio",
      "Pipeline: fraction of the last step spent in point-to-point waits (mean over ranks)");
  memory_peak_ = AddGauge(r, "moe_job_memory_peak_bytes",
                          "Rank 0's device memory peak over the last step (its tensors)");
  eval_loss_ =
      AddGauge(r, "moe_job_eval_loss", "Validation loss of the last evaluation (nats per token)");
  eval_ppl_ = AddGauge(r, "moe_job_eval_ppl", "Validation perplexity of the last evaluation");
  eval_mtp_loss_ = AddGauge(r, "moe_job_eval_mtp_loss",
                            "Validation MTP loss of the last evaluation (nats per token)");
  last_step_ = AddGauge(r, "moe_job_step_seconds", "Wall time of the job's last step");
  planned_step_ = AddGauge(
      r, "moe_job_planned_step_seconds",
      "The planner's step time for the attempt's placement (moe-controller --plan-cluster)");
  lr_ = AddGauge(r, "moe_job_learning_rate", "Learning rate of the last step");
  a2a_ = AddCounter(r, "moe_job_alltoall_seconds_total",
                    "Seconds rank 0 spent in the MoE token all-to-all");
  compute_ = AddCounter(r, "moe_job_compute_seconds_total",
                        "Seconds rank 0 spent in forward and backward, all-to-all excluded");
  imbalance_ = AddGauge(r, "moe_job_expert_load_imbalance_ratio",
                        "Tokens on the busiest expert / mean tokens per expert, by MoE layer");
  state_ = AddGauge(r, "moe_job_state",
                    "1 for the job's current state, 0 for RUNNING and each state it left");
  restarts_ = AddCounter(r, "moe_job_restarts_total", "Restarts after failures");
  RegisterRankSeries(r);
  straggler_gauge_ = AddGauge(r, "moe_job_straggler", "1 while the rank is flagged as a straggler");
  step_ = AddGauge(r, "moe_job_step", "Last completed step");
  workers_ = AddGauge(r, "moe_workers", "Workers by state and rack");
  rack_spares_ = AddGauge(r, "moe_rack_spares",
                          "Idle workers of the rack held back from new jobs (--spares-per-rack)");
  rack_spares_in_use_ = AddGauge(
      r, "moe_rack_spares_in_use",
      "Busy workers of the rack beyond what new jobs may use: restarts running on its spares");
  queue_ = AddGauge(r, "moe_scheduler_queue_length",
                    "Jobs waiting for placement (pending or restarting)");
  decision_ =
      AddHistogram(r, "moe_scheduler_decision_duration_seconds", "Time of one scheduling pass");
  BuildGauge()
      .Name("moe_build_info")
      .Help("Build of the controller")
      .Register(r)
      .Add({{"version", version}})
      .Set(1);
  queue_->Add({}).Set(0);
  rendezvous_keys_ = &BuildGauge()
                          .Name("moe_rendezvous_keys")
                          .Help("Keys held in the rendezvous store (an attempt's go when it ends)")
                          .Register(r);
  rendezvous_keys_->Add({}).Set(0);
  store_batches_ =
      &AddCounter(r, "moe_store_batches_total",
                  "Transactions the controller's one writer committed (one fsync each)")
           ->Add({});
  store_writes_ = &AddCounter(r, "moe_store_writes_total",
                              "Changes in those transactions (writes / batches: the batching)")
                       ->Add({});
  stalled_ =
      &AddCounter(r, "moe_controller_stalled_seconds_total",
                  "Time the controller did not tick (stopped, starved): given back to leases")
           ->Add({});
  registrations_refused_ =
      &AddCounter(r, "moe_registrations_refused_total",
                  "Registrations told to come back later (more than 32 in flight: a herd)")
           ->Add({});
  registration_backlog_ =
      &AddGauge(r, "moe_registration_backlog_seconds",
                "Seconds ahead of the last slot the registration gate handed a refused agent")
           ->Add({});
  RegisterGoodput(r);
  RegisterCheckpointsAndQueues(r);
  RegisterQueueWaits(r);
}

// Each rank's series, the job's throughput in base units and its info series.
void MetricsAggregator::RegisterRankSeries(prometheus::Registry& r) {
  rank_step_ = AddGauge(r, "moe_rank_step_duration_seconds", "Wall time of the rank's last step");
  rank_compute_ = AddGauge(r, "moe_rank_compute_seconds",
                           "The rank's own work in its last step (forward + backward)");
  rank_tflops_ = AddGauge(
      r, "moe_rank_tflops",
      "TFLOP/s of the rank's device (Megatron's formula), while its job runs; sum by rack for a "
      "rack's TFLOP/s (deprecated: moe_rank_flops_per_second)");
  rank_flops_ = AddGauge(r, "moe_rank_flops_per_second",
                         "FLOP/s of the rank's device (Megatron's formula), while its job runs");
  job_device_flops_ =
      AddGauge(r, "moe_job_device_flops_per_second",
               "Model FLOP/s per device over the last step (Megatron's formula), while it runs");
  job_info_ = AddGauge(r, "moe_job_info",
                       "1 for every job shown: its name, queue, user (owner) and priority, to join "
                       "on job_id");
}

void MetricsAggregator::RegisterQueueWaits(prometheus::Registry& r) {
  admission_wait_ = AddHistogram(r, "moe_queue_admission_wait_seconds",
                                 "From a job entering its queue (submitted, preempted, restarting) "
                                 "to its placement, by queue");
  waiting_jobs_ = AddGauge(r, "moe_queue_waiting_jobs",
                           "The queue's jobs waiting for placement, by why the last scheduling "
                           "pass left them waiting (quota, capacity, busy, dependency, backoff, "
                           "preempting, held, stuck)");
  oldest_wait_ = AddGauge(r, "moe_queue_oldest_wait_seconds",
                          "The longest current wait among the queue's jobs waiting for that "
                          "reason (0: none)");
  wait_slo_ = AddGauge(r, "moe_queue_wait_slo_seconds",
                       "The queue's admission SLO (its wait_slo_seconds), where it sets one");
}

void MetricsAggregator::SetWaitSlos(const std::map<std::string, double>& slo_by_queue) {
  for (const auto& [queue, slo] : slo_by_queue) {
    if (slo > 0) wait_slo_->Add({{"queue", queue}}).Set(slo);
  }
}

void MetricsAggregator::SetWaiting(const std::vector<WaitingJob>& waiting, double now) {
  std::map<std::string, std::map<std::string, std::pair<int, double>>> by_queue;
  for (const WaitingJob& w : waiting) {
    auto it = jobs_.find(w.job_id);
    if (it == jobs_.end()) continue;
    const JobSeries& s = *it->second;
    auto& [count, oldest] = by_queue[s.queue][w.reason];
    ++count;
    if (s.queued_since >= 0) oldest = std::max(oldest, now - s.queued_since);
  }
  for (const auto& [queue, reasons] : by_queue) known_queues_.insert(queue);
  for (const std::string& queue : known_queues_) {
    const auto q = by_queue.find(queue);
    for (const WaitClass c : kWaitClasses) {
      const std::map<std::string, std::string> labels = {{"queue", queue},
                                                         {"reason", WaitClassName(c)}};
      std::pair<int, double> v{0, 0.0};
      if (q != by_queue.end()) {
        const auto r = q->second.find(WaitClassName(c));
        if (r != q->second.end()) v = r->second;
      }
      waiting_jobs_->Add(labels).Set(v.first);
      oldest_wait_->Add(labels).Set(v.second);
    }
  }
}

void MetricsAggregator::RegisterCheckpointsAndQueues(prometheus::Registry& r) {
  checkpoint_step_ =
      AddGauge(r, "moe_job_checkpoint_step",
               "The newest complete checkpoint the job's ranks reported (0: none yet)");
  checkpoint_age_ =
      AddGauge(r, "moe_job_checkpoint_age_seconds",
               "Seconds since the newest checkpoint first showed in a step report (before the "
               "first checkpoint: since the first step): the work a failure would lose");
  checkpoint_save_ = AddGauge(
      r, "moe_job_checkpoint_save_seconds",
      "Seconds training stood still for the last checkpoint save (rank 0's checkpoint stall: a "
      "synchronous save's whole write; an asynchronous one's copy to host memory and waits)");
  queue_quota_ = AddGauge(r, "moe_queue_quota",
                          "The queue's nominal quota in ranks (devices) of the device type");
  queue_usage_ = AddGauge(r, "moe_queue_usage",
                          "Ranks (devices) of the device type the queue's running jobs use");
  queue_borrowed_ = AddGauge(r, "moe_queue_borrowed",
                             "Ranks the queue uses past its nominal quota, lent by its cohort");
  queue_pending_ =
      AddGauge(r, "moe_queue_pending_jobs",
               "The queue's jobs waiting for placement (PENDING, PREEMPTED, RESTARTING)");
  finished_ =
      AddCounter(r, "moe_jobs_finished_total",
                 "Jobs that reached a final state while this controller ran, by that state");
  for (const auto state : {moe::v1::SUCCEEDED, moe::v1::FAILED, moe::v1::CANCELLED})
    finished_->Add({{"state", moe::v1::JobState_Name(state)}});
}

void MetricsAggregator::SetCheckpoint(const moe::v1::Job& job, double now) {
  if (!jobs_.count(job.id())) return;  // no series (never placed, or dropped after the retention)
  const std::map<std::string, std::string> labels = {{"job_id", job.id()}};
  checkpoint_step_->Add(labels).Set(static_cast<double>(job.checkpoint_step()));
  if (job.checkpoint_time() > 0)
    checkpoint_age_->Add(labels).Set(std::max(0.0, now - job.checkpoint_time()));
}

void MetricsAggregator::SetQueues(const std::vector<moe::v1::QueueStatus>& queues) {
  std::set<std::pair<std::string, std::string>> now;
  for (const moe::v1::QueueStatus& q : queues) {
    known_queues_.insert(q.name());
    queue_pending_->Add({{"queue", q.name()}}).Set(q.pending_jobs());
    for (const moe::v1::QueueResource& r : q.resources()) {
      const std::map<std::string, std::string> labels = {{"queue", q.name()},
                                                         {"device", r.device()}};
      if (r.nominal() >= 0) queue_quota_->Add(labels).Set(static_cast<double>(r.nominal()));
      queue_usage_->Add(labels).Set(static_cast<double>(r.used()));
      queue_borrowed_->Add(labels).Set(static_cast<double>(r.borrowed()));
      now.insert({q.name(), r.device()});
    }
  }
  // A device the queue no longer uses goes to 0 rather than vanishing (as moe_workers does).
  for (const auto& [queue, device] : queue_series_) {
    if (now.count({queue, device})) continue;
    queue_usage_->Add({{"queue", queue}, {"device", device}}).Set(0);
    queue_borrowed_->Add({{"queue", queue}, {"device", device}}).Set(0);
  }
  queue_series_.insert(now.begin(), now.end());
}

// Once per job reaching a final state on this controller: a job loaded in a final state after a
// restart (its `from` is JOB_STATE_UNSPECIFIED) is not counted again; the counter starts at 0 with
// each controller process, as counters do, and rate()/increase() see the reset.
void MetricsAggregator::CountFinished(moe::v1::JobState state) {
  finished_->Add({{"state", moe::v1::JobState_Name(state)}}).Increment();
}

void MetricsAggregator::RegisterGoodput(prometheus::Registry& r) {
  goodput_ = AddGauge(r, "moe_job_goodput_ratio",
                      "Productive seconds / wall seconds since the job's submission");
  lost_ =
      AddCounter(r, "moe_job_lost_seconds_total",
                 "Seconds of the job's wall time lost, by cause (evaluation: wanted, not lost)");
  cluster_goodput_ = &AddGauge(r, "moe_cluster_goodput_ratio",
                               "Productive / wall seconds over the jobs this controller shows")
                          ->Add({});
  cluster_lost_ = AddCounter(r, "moe_lost_seconds_total", "Seconds lost over every job, by cause");
  goodput_floor_ = &AddGauge(r, "moe_goodput_floor",
                             "The goodput below which MoEJobGoodputLow fires (--goodput-floor)")
                        ->Add({});
}

void MetricsAggregator::SetGoodputFloor(double floor) { goodput_floor_->Set(floor); }

void MetricsAggregator::SetGoodput(const std::string& job_id, const moe::v1::Goodput& g) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;  // no series (never placed, or dropped after the retention)
  JobSeries& s = *it->second;
  goodput_->Add({{"job_id", job_id}}).Set(g.ratio());
  for (const char* cause : kGoodputCauses) {
    const double v = GoodputLost(g, cause), delta = v - s.lost[cause];
    if (delta <= 0) continue;
    lost_->Add({{"job_id", job_id}, {"cause", cause}}).Increment(delta);
    cluster_lost_->Add({{"cause", cause}}).Increment(delta);
    s.lost[cause] = v;
  }
  // The cluster's sums move by this job's change (a sum over every job per call would be
  // quadratic in jobs: every live job is published once a second).
  productive_sum_ += g.productive_seconds() - s.productive;
  wall_sum_ += g.wall_seconds() - s.wall;
  s.productive = g.productive_seconds();
  s.wall = g.wall_seconds();
  cluster_goodput_->Set(wall_sum_ > 0 ? productive_sum_ / wall_sum_ : 0);
}

void MetricsAggregator::SetStore(int64_t batches, int64_t writes, double stalled_seconds) {
  store_batches_->Increment(std::max(0.0, static_cast<double>(batches) - store_batches_->Value()));
  store_writes_->Increment(std::max(0.0, static_cast<double>(writes) - store_writes_->Value()));
  stalled_->Increment(std::max(0.0, stalled_seconds - stalled_->Value()));
}

void MetricsAggregator::SetRegistrationGate(int64_t refused, double backlog_seconds) {
  registrations_refused_->Increment(
      std::max(0.0, static_cast<double>(refused) - registrations_refused_->Value()));
  registration_backlog_->Set(backlog_seconds);
}

MetricsAggregator::~MetricsAggregator() = default;

MetricsAggregator::JobSeries& MetricsAggregator::Series(const std::string& job_id) {
  auto& p = jobs_[job_id];
  if (!p) {
    p = std::make_unique<JobSeries>();
    p->id = job_id;
    restarts_->Add({{"job_id", job_id}});
    flops_->Add({{"job_id", job_id}});
    tokens_->Add({{"job_id", job_id}});
  }
  return *p;
}

void MetricsAggregator::StartAttempt(const std::string& job_id, int attempt,
                                     const std::vector<RankInfo>& ranks, int64_t world_size) {
  JobSeries& s = Series(job_id);
  RemoveRankSeries(s);  // the previous attempt's: a rank may now sit in another rack
  s.attempt = attempt;
  s.world = world_size;
  s.ranks = ranks;
  s.pending.clear();
  s.over.assign(ranks.size(), 0);
  s.under.assign(ranks.size(), 0);
  s.stragglers.clear();
  for (size_t r = 0; r < ranks.size(); ++r)
    straggler_gauge_->Add({{"job_id", job_id}, {"rank", std::to_string(r)}}).Set(0);
}

std::optional<moe::v1::StepMetrics> MetricsAggregator::OnStep(
    const std::string& job_id, int attempt, int rank, const moe::v1::StepMetrics& m,
    std::vector<StragglerChange>* changes) {
  JobSeries& s = Series(job_id);
  if (attempt != s.attempt || rank < 0 || rank >= static_cast<int>(s.ranks.size()))
    return std::nullopt;
  const size_t r = static_cast<size_t>(rank);
  if (s.rank_times.size() != s.ranks.size())
    s.rank_times.assign(s.ranks.size(), {nullptr, nullptr});
  if (s.rank_times[r].first == nullptr) {
    const std::map<std::string, std::string> rank_labels = RankLabels(s, r);
    s.rank_times[r] = {&rank_step_->Add(rank_labels), &rank_compute_->Add(rank_labels)};
  }
  s.rank_times[r].first->Set(m.step_seconds());
  s.rank_times[r].second->Set(m.compute_seconds());
  auto& bucket = s.pending[m.step()];
  bucket[rank] = m;
  if (bucket.size() < s.ranks.size()) {
    // Keep a few steps of slack; a rank that died will never complete older ones.
    while (s.pending.size() > 8) s.pending.erase(s.pending.begin());
    return std::nullopt;
  }
  // Every rank has reported this step: rank 0's figures, every rank's times.
  std::map<int, moe::v1::StepMetrics> all = std::move(bucket);
  s.pending.erase(s.pending.begin(), s.pending.upper_bound(m.step()));
  moe::v1::StepMetrics out = all.at(0);
  out.set_job_id(job_id);
  out.set_attempt(attempt);
  std::vector<double> compute;
  for (const auto& [r, rm] : all) {
    out.add_rank_step_seconds(rm.step_seconds());
    out.add_rank_compute_seconds(rm.compute_seconds());
    out.add_rank_racks(s.ranks[static_cast<size_t>(r)].rack);
    compute.push_back(rm.compute_seconds());
  }
  UpdateStragglers(s, compute, changes);
  for (int r : s.stragglers) out.add_stragglers(r);
  ExportJobStep(s, out);
  s.recent_step_seconds.push_back(out.step_seconds());
  if (s.recent_step_seconds.size() > 20) s.recent_step_seconds.pop_front();
  double mean = 0;
  for (double v : s.recent_step_seconds) mean += v;
  mean /= static_cast<double>(s.recent_step_seconds.size());
  out.set_eta_seconds(mean *
                      static_cast<double>(std::max<int64_t>(0, out.total_steps() - out.step())));
  out.set_time(clock_.Now());
  return out;
}

// Stragglers against the median compute time of this step.
void MetricsAggregator::UpdateStragglers(JobSeries& s, const std::vector<double>& compute,
                                         std::vector<StragglerChange>* changes) {
  std::vector<double> sorted = compute;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  if (s.ranks.size() < 2 || median <= 0) return;
  for (size_t r = 0; r < compute.size(); ++r) {
    const double ratio = compute[r] / median;
    if (ratio > 1 + straggler_.margin) {
      s.over[r]++;
      s.under[r] = 0;
    } else {
      s.under[r]++;
      s.over[r] = 0;
    }
    const int rank = static_cast<int>(r);
    const bool flagged = s.stragglers.count(rank) > 0;
    if (flagged ? s.under[r] < straggler_.window : s.over[r] < straggler_.window) continue;
    if (flagged) {
      s.stragglers.erase(rank);
    } else {
      s.stragglers.insert(rank);
    }
    straggler_gauge_->Add({{"job_id", s.id}, {"rank", std::to_string(r)}}).Set(flagged ? 0 : 1);
    if (changes) changes->push_back({rank, !flagged, ratio});
  }
}

namespace {

// The job's series {job_id} of `family`, looked up once per job (JobSeries::step_series). Only for
// families whose job series DropSeries alone removes: a series removed elsewhere would leave the
// pointer dangling.
template <class Metric>
Metric& JobMetric(std::unordered_map<const void*, void*>& cache, prometheus::Family<Metric>* family,
                  const std::string& job_id) {
  void*& p = cache[family];
  if (p == nullptr) p = &family->Add({{"job_id", job_id}});
  return *static_cast<Metric*>(p);
}

}  // namespace

// The job's series from a completed step (rank 0's figures).
void MetricsAggregator::ExportJobStep(JobSeries& s, const moe::v1::StepMetrics& out) {
  const std::map<std::string, std::string> job_labels = {{"job_id", s.id}};
  const auto job = [&s](auto* family) -> auto& { return JobMetric(s.step_series, family, s.id); };
  // What runs now: a step that a stopping rank reports after its job was preempted, stopped or
  // requeued counts in the job's totals, but sets no throughput (a rack's sum is of running jobs).
  if (s.running) {
    for (size_t r = 0; r < s.ranks.size(); ++r) {
      rank_tflops_->Add(RankLabels(s, r)).Set(out.tflops_per_device());
      rank_flops_->Add(RankLabels(s, r)).Set(out.tflops_per_device() * 1e12);
    }
    s.throughput = true;
    tflops_->Add(job_labels).Set(out.tflops_per_device());
    job_device_flops_->Add(job_labels).Set(out.tflops_per_device() * 1e12);
    mfu_->Add(job_labels).Set(out.mfu());
    if (out.mfu_peak_tflops() > 0) peak_->Add(job_labels).Set(out.mfu_peak_tflops());
  }
  const double flops =
      out.tflops_per_device() * 1e12 * out.step_seconds() * static_cast<double>(s.world);
  job(flops_).Increment(flops);
  job(tokens_).Increment(static_cast<double>(out.tokens()));
  step_duration_->Add(job_labels, StepBuckets()).Observe(out.step_seconds());
  job(loss_).Set(out.loss());
  job(last_step_).Set(out.step_seconds());
  if (out.mtp_loss_weight() > 0) job(mtp_loss_).Set(out.mtp_loss());
  job(grad_norm_).Set(out.grad_norm());
  job(lr_).Set(out.lr());
  job(bubble_).Set(out.pipeline_bubble());
  if (out.has_eval_loss()) {
    job(eval_loss_).Set(out.eval_loss());
    job(eval_ppl_).Set(out.eval_ppl());
    if (out.mtp_loss_weight() > 0) job(eval_mtp_loss_).Set(out.eval_mtp_loss());
  }
  job(memory_peak_).Set(static_cast<double>(out.memory_peak_bytes()));
  job(a2a_).Increment(out.alltoall_seconds());
  job(compute_).Increment(out.compute_seconds());
  job(step_).Set(static_cast<double>(out.step()));
  if (out.checkpoint_stall_seconds() > 0) job(checkpoint_save_).Set(out.checkpoint_stall_seconds());
  for (int l = 0; l < out.expert_load_imbalance_per_layer_size(); ++l) {
    imbalance_->Add({{"job_id", s.id}, {"layer", std::to_string(l)}})
        .Set(out.expert_load_imbalance_per_layer(l));
    s.layers.insert(std::to_string(l));
  }
}

void MetricsAggregator::OnJobStateChanged(const moe::v1::Job& job, moe::v1::JobState from) {
  const moe::v1::JobState state = job.state();
  const bool loaded = from == moe::v1::JOB_STATE_UNSPECIFIED;
  const bool attempt_starts = state == moe::v1::SCHEDULED || (loaded && state == moe::v1::RUNNING);
  if (attempt_starts && job.placement_size() > 0) {
    std::vector<RankInfo> ranks;
    for (const auto& p : job.placement())
      ranks.push_back({p.rack(), p.worker(), p.node(), p.device()});
    StartAttempt(job.id(), job.attempt(), ranks, job.placement_size());
    if (job.planned_step_seconds() > 0) {
      planned_step_->Add({{"job_id", job.id()}}).Set(job.planned_step_seconds());
    } else {
      planned_step_->Remove(&planned_step_->Add({{"job_id", job.id()}}));
    }
  }
  // Restarts after failures only: a requeue after a worker left cleanly uses none (job.restarts()).
  JobSeries& series = Series(job.id());
  if (state == moe::v1::RESTARTING && !loaded && series.restarts >= 0 &&
      job.restarts() > series.restarts) {
    restarts_->Add({{"job_id", job.id()}}).Increment(job.restarts() - series.restarts);
  }
  series.restarts = job.restarts();
  SetInfo(series, job);
  TrackQueueing(series, job, from);
  if (!loaded && from != state && IsFinal(state) && !IsFinal(from)) CountFinished(state);
  SetState(job.id(), state);
  SetGoodput(job.id(), job.goodput());  // a change of state closes an interval of the account
}

void MetricsAggregator::SetState(const std::string& job_id, moe::v1::JobState state) {
  JobSeries& s = Series(job_id);
  // RUNNING's series from the job's first appearance (MoEJobNoRecentCheckpoint's min_over_time
  // must see the 0 of a job that waits, also one this controller loaded), the others as the job
  // enters them: 1 for the current state, 0 for those it left. Not all ten at submit: each
  // registration hashes its labels under the family's lock, and most jobs enter four states.
  const auto add = [&](moe::v1::JobState v) {
    const auto at = static_cast<size_t>(v);
    if (v < moe::v1::PENDING || v == moe::v1::INVALID || at >= s.state_gauges.size() ||
        s.state_gauges[at] != nullptr)
      return;
    s.state_gauges[at] = &state_->Add({{"job_id", job_id}, {"state", moe::v1::JobState_Name(v)}});
  };
  if (s.state_gauges.empty()) {
    s.state_gauges.assign(moe::v1::TIMEOUT + 1, nullptr);
    add(moe::v1::RUNNING);
  }
  add(state);
  for (size_t v = 0; v < s.state_gauges.size(); ++v) {
    if (s.state_gauges[v] != nullptr) s.state_gauges[v]->Set(static_cast<int>(v) == state ? 1 : 0);
  }
  const bool terminal = IsFinal(state);
  s.ended_at = terminal ? clock_.Monotonic() : 0;
  s.running = state == moe::v1::SCHEDULED || state == moe::v1::RUNNING;
  if (!s.running) DropThroughput(s);
  if (terminal)
    checkpoint_age_->Remove(&checkpoint_age_->Add({{"job_id", job_id}}));  // none at risk
}

// moe_job_info{job_id, name, queue, user, priority}: set once, and again if a label changed.
void MetricsAggregator::SetInfo(JobSeries& s, const moe::v1::Job& job) {
  const moe::v1::Metadata& m = job.spec().metadata();
  s.queue = m.queue().empty() ? default_queue_ : m.queue();
  std::map<std::string, std::string> info = {{"job_id", job.id()},
                                             {"name", m.name()},
                                             {"queue", s.queue},
                                             {"user", job.owner()},
                                             {"priority", std::to_string(m.priority())}};
  if (info == s.info) return;
  if (!s.info.empty()) job_info_->Remove(&job_info_->Add(s.info));
  job_info_->Add(info).Set(1);
  s.info = std::move(info);
}

// When the job entered its queue (submitted, preempted, requeued, restarting; a job loaded queued:
// its last change), and at its placement the wait, into moe_queue_admission_wait_seconds.
void MetricsAggregator::TrackQueueing(JobSeries& s, const moe::v1::Job& job,
                                      moe::v1::JobState from) {
  const bool loaded = from == moe::v1::JOB_STATE_UNSPECIFIED;
  if (IsQueued(job.state())) {
    if (loaded || !IsQueued(from) || s.queued_since < 0) s.queued_since = job.updated_at();
    return;
  }
  if (job.state() == moe::v1::SCHEDULED && !loaded && s.queued_since >= 0) {
    admission_wait_->Add({{"queue", s.queue}}, AdmissionBuckets())
        .Observe(std::max(0.0, job.updated_at() - s.queued_since));
  }
  s.queued_since = -1;
}

// A job that does not run trains nothing: its throughput gauges go at once (a rack's TFLOP/s,
// summed over moe_rank_tflops, is what runs now); its loss, state, counters and each rank's last
// step time stay (a job that ended keeps them for the retention).
void MetricsAggregator::DropThroughput(const JobSeries& s) {
  if (s.throughput) {
    const std::map<std::string, std::string> job = {{"job_id", s.id}};
    tflops_->Remove(&tflops_->Add(job));
    job_device_flops_->Remove(&job_device_flops_->Add(job));
    mfu_->Remove(&mfu_->Add(job));
    peak_->Remove(&peak_->Add(job));
    s.throughput = false;
  }
  // Each rank's last step time stays with the loss (which rank was slow at the end, on which node);
  // what it runs now (moe_rank_tflops) and its straggler flag go.
  RemoveRankSeries(s, /*keep_last_step=*/true);
}

void MetricsAggregator::SetWorkers(const std::vector<moe::v1::Worker>& workers) {
  std::map<std::pair<std::string, std::string>, int> counts;
  for (const auto& w : workers) {
    std::string state = moe::v1::WorkerState_Name(w.state());
    for (auto& c : state) c = static_cast<char>(std::tolower(c));
    if (w.drained() && w.state() == moe::v1::BUSY)
      state = "draining";  // drained, still running its rank
    counts[{state, w.rack()}]++;
  }
  SetWorkerCounts(std::move(counts));
}

void MetricsAggregator::SetWorkerCounts(std::map<std::pair<std::string, std::string>, int> counts) {
  // Zero the combinations that emptied, so a rack's lost count goes back to 0 instead of vanishing.
  for (const auto& key : worker_series_)
    if (!counts.count(key)) counts[key] = 0;
  for (const auto& [key, n] : counts) {
    workers_->Add({{"state", key.first}, {"rack", key.second}}).Set(n);
    worker_series_.insert(key);
  }
  // Every state appears for every rack, so queries over a state never come back empty.
  std::set<std::string> racks;
  for (const auto& key : worker_series_) racks.insert(key.second);
  for (const auto& rack : racks) {
    for (const char* st : {"idle", "busy", "lost", "drained", "draining", "leaving"}) {
      if (!worker_series_.count({st, rack})) {
        workers_->Add({{"state", st}, {"rack", rack}}).Set(0);
        worker_series_.insert({st, rack});
      }
    }
  }
}

void MetricsAggregator::SetRackSpares(const std::map<std::string, RackCount>& racks) {
  for (const std::string& rack : spare_racks_) {
    if (racks.count(rack)) continue;
    rack_spares_->Add({{"rack", rack}}).Set(0);
    rack_spares_in_use_->Add({{"rack", rack}}).Set(0);
  }
  for (const auto& [rack, r] : racks) {
    rack_spares_->Add({{"rack", rack}}).Set(r.spares);
    rack_spares_in_use_->Add({{"rack", rack}}).Set(r.spares_in_use);
    spare_racks_.insert(rack);
  }
}

void MetricsAggregator::SetQueueLength(size_t n) { queue_->Add({}).Set(static_cast<double>(n)); }

void MetricsAggregator::SetRendezvousKeys(size_t n) {
  rendezvous_keys_->Add({}).Set(static_cast<double>(n));
}

void MetricsAggregator::ObserveSchedulerDecision(double seconds) {
  decision_->Add({}, prometheus::Histogram::BucketBoundaries{1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1})
      .Observe(seconds);
}

std::set<int> MetricsAggregator::Stragglers(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? std::set<int>{} : it->second->stragglers;
}

void MetricsAggregator::RemoveRankSeries(const JobSeries& s, bool keep_last_step) {
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const std::map<std::string, std::string> labels = RankLabels(s, r);
    if (!keep_last_step) {
      rank_step_->Remove(&rank_step_->Add(labels));
      rank_compute_->Remove(&rank_compute_->Add(labels));
      s.rank_times.clear();
    }
    rank_tflops_->Remove(&rank_tflops_->Add(labels));
    rank_flops_->Remove(&rank_flops_->Add(labels));
    straggler_gauge_->Remove(
        &straggler_gauge_->Add({{"job_id", s.id}, {"rank", std::to_string(r)}}));
  }
}

void MetricsAggregator::DropSeries(const std::string& job_id) {
  JobSeries& s = *jobs_.at(job_id);
  s.step_series.clear();  // removed below
  const std::map<std::string, std::string> job = {{"job_id", job_id}};
  flops_->Remove(&flops_->Add(job));
  tflops_->Remove(&tflops_->Add(job));
  job_device_flops_->Remove(&job_device_flops_->Add(job));
  if (!s.info.empty()) job_info_->Remove(&job_info_->Add(s.info));
  mfu_->Remove(&mfu_->Add(job));
  peak_->Remove(&peak_->Add(job));
  tokens_->Remove(&tokens_->Add(job));
  step_duration_->Remove(&step_duration_->Add(job, prometheus::Histogram::BucketBoundaries{}));
  loss_->Remove(&loss_->Add(job));
  mtp_loss_->Remove(&mtp_loss_->Add(job));
  grad_norm_->Remove(&grad_norm_->Add(job));
  lr_->Remove(&lr_->Add(job));
  last_step_->Remove(&last_step_->Add(job));
  planned_step_->Remove(&planned_step_->Add(job));
  bubble_->Remove(&bubble_->Add(job));
  eval_loss_->Remove(&eval_loss_->Add(job));
  eval_ppl_->Remove(&eval_ppl_->Add(job));
  eval_mtp_loss_->Remove(&eval_mtp_loss_->Add(job));
  memory_peak_->Remove(&memory_peak_->Add(job));
  a2a_->Remove(&a2a_->Add(job));
  compute_->Remove(&compute_->Add(job));
  restarts_->Remove(&restarts_->Add(job));
  step_->Remove(&step_->Add(job));
  checkpoint_step_->Remove(&checkpoint_step_->Add(job));
  checkpoint_age_->Remove(&checkpoint_age_->Add(job));
  checkpoint_save_->Remove(&checkpoint_save_->Add(job));
  goodput_->Remove(&goodput_->Add(job));
  productive_sum_ -= s.productive;  // the cluster's figure covers the jobs shown
  wall_sum_ -= s.wall;
  for (const auto& [cause, v] : s.lost)
    lost_->Remove(&lost_->Add({{"job_id", job_id}, {"cause", cause}}));
  for (const auto& l : s.layers)
    imbalance_->Remove(&imbalance_->Add({{"job_id", job_id}, {"layer", l}}));
  for (prometheus::Gauge* g : s.state_gauges) {
    if (g != nullptr) state_->Remove(g);
  }
  s.state_gauges.clear();
  RemoveRankSeries(s);
}

void MetricsAggregator::OnJobDeleted(const std::string& job_id) {
  if (!jobs_.count(job_id)) return;
  DropSeries(job_id);
  jobs_.erase(job_id);
}

void MetricsAggregator::Expire() {
  const double now = clock_.Monotonic();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second->ended_at > 0 && now - it->second->ended_at > retention_) {
      DropSeries(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace moe::controller
