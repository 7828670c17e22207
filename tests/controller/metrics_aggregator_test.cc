// MetricsAggregator on its own, read back from its Prometheus registry: job metrics merged from
// every rank's report (TFLOP/s, FLOPs, tokens, ETA), stragglers flagged and cleared, the job's
// state and restarts from JobManager events, the cluster view, checkpoints, queues, finished jobs,
// and series dropped after the retention time.
#include "controller/metrics_aggregator.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <optional>

namespace moe::controller {
namespace {

using Labels = std::map<std::string, std::string>;

// The value of series `name`{labels} (a histogram's sample count), or nothing when there is none.
std::optional<double> Value(prometheus::Registry& registry, const std::string& name,
                            const Labels& labels) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      Labels got;
      for (const auto& l : metric.label) got[l.name] = l.value;
      if (got != labels) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

moe::v1::Job JobIn(moe::v1::JobState state, int attempt, const std::vector<std::string>& racks) {
  moe::v1::Job job;
  job.set_id("j");
  job.set_state(state);
  job.set_attempt(attempt);
  for (size_t r = 0; r < racks.size(); ++r) {
    auto* p = job.add_placement();
    p->set_rank(static_cast<int>(r));
    p->set_worker("w" + std::to_string(r));
    p->set_rack(racks[r]);
    p->set_node("n" + std::to_string(r));
    p->set_device("cuda:" + std::to_string(r));
  }
  return job;
}

// A rank's series labels as JobIn places it: where it runs, joinable with DCGM (node, device).
Labels RankL(int r, const std::string& rack) {
  const std::string n = std::to_string(r);
  return {{"job_id", "j"},   {"rank", n},         {"rack", rack},
          {"node", "n" + n}, {"worker", "w" + n}, {"device", "cuda:" + n}};
}

moe::v1::StepMetrics Report(int64_t step, double compute, double tflops = 100) {
  moe::v1::StepMetrics m;
  m.set_step(step);
  m.set_total_steps(10);
  m.set_step_seconds(0.5);
  m.set_compute_seconds(compute);
  m.set_tflops_per_device(tflops);
  m.set_mfu_peak_tflops(989);
  m.set_tokens(4096);
  m.set_loss(4.5);
  return m;
}

class MetricsAggregatorTest : public ::testing::Test {
 protected:
  std::optional<double> Get(const std::string& name, const Labels& labels) {
    return Value(*registry_, name, labels);
  }
  // Every rank reports `step`; returns the job metrics the last report completed.
  std::optional<moe::v1::StepMetrics> Step(int attempt, int64_t step,
                                           const std::vector<double>& compute,
                                           std::vector<StragglerChange>* changes = nullptr) {
    std::optional<moe::v1::StepMetrics> out;
    for (size_t r = 0; r < compute.size(); ++r) {
      out = metrics_.OnStep("j", attempt, static_cast<int>(r),
                            Report(step, compute[r], r == 0 ? 120 : 90), changes);
      if (r + 1 < compute.size()) {
        EXPECT_FALSE(out.has_value()) << "step " << step << " is not complete yet";
      }
    }
    return out;
  }

  FakeClock clock_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  MetricsAggregator metrics_{registry_, clock_, StragglerOptions{/*margin=*/0.3, /*window=*/3},
                             /*retention_seconds=*/60, "9.9.9"};
};

TEST_F(MetricsAggregatorTest, AStepCompletedByEveryRankGivesTheJobsFigures) {
  metrics_.OnJobStateChanged(JobIn(moe::v1::SCHEDULED, 1, {"r0", "r1"}), moe::v1::PENDING);
  auto out = Step(1, 1, {0.2, 0.3});
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->job_id(), "j");
  EXPECT_EQ(out->tflops_per_device(), 120) << "rank 0's figures";
  EXPECT_EQ(out->rank_compute_seconds_size(), 2);
  EXPECT_EQ(out->rank_racks(1), "r1");
  EXPECT_DOUBLE_EQ(out->eta_seconds(), 0.5 * 9);
  EXPECT_EQ(Get("moe_job_tflops_per_device", {{"job_id", "j"}}), 120.0);
  EXPECT_EQ(Get("moe_job_peak_tflops_per_device", {{"job_id", "j"}}), 989.0)
      << "what MFU is measured against";
  EXPECT_DOUBLE_EQ(*Get("moe_job_model_flops_total", {{"job_id", "j"}}), 120e12 * 0.5 * 2)
      << "per device x devices";
  EXPECT_EQ(Get("moe_job_tokens_total", {{"job_id", "j"}}), 4096.0);
  EXPECT_EQ(Get("moe_job_step", {{"job_id", "j"}}), 1.0);
  EXPECT_EQ(Get("moe_job_loss", {{"job_id", "j"}}), 4.5);
  EXPECT_EQ(Get("moe_job_step_duration_seconds", {{"job_id", "j"}}), 1.0) << "one observation";
  // Buckets to hours: a 671B step (70-250 s) and a stalled one (an hour) still land in a bucket.
  const std::string page = prometheus::TextSerializer().Serialize(registry_->Collect());
  for (const char* le : {"le=\"300\"", "le=\"3600\"", "le=\"14400\""}) {
    EXPECT_NE(page.find(std::string("moe_job_step_duration_seconds_bucket{job_id=\"j\",") + le),
              std::string::npos)
        << le;
  }
  EXPECT_EQ(Get("moe_rank_tflops", RankL(1, "r1")), 120.0);
  EXPECT_EQ(Get("moe_rank_compute_seconds", RankL(1, "r1")), 0.3);
  ASSERT_TRUE(Step(1, 2, {0.2, 0.3}).has_value());
  EXPECT_EQ(Get("moe_job_tokens_total", {{"job_id", "j"}}), 8192.0) << "counters add up";
}

TEST_F(MetricsAggregatorTest, ReportsOfAnotherAttemptOrAnUnknownRankAreIgnored) {
  metrics_.OnJobStateChanged(JobIn(moe::v1::SCHEDULED, 2, {"r0"}), moe::v1::RESTARTING);
  EXPECT_FALSE(metrics_.OnStep("j", 1, 0, Report(1, 0.1), nullptr).has_value())
      << "attempt 1 is over";
  EXPECT_FALSE(metrics_.OnStep("j", 2, 1, Report(1, 0.1), nullptr).has_value()) << "no rank 1";
  EXPECT_TRUE(metrics_.OnStep("j", 2, 0, Report(1, 0.1), nullptr).has_value());
}

TEST_F(MetricsAggregatorTest, AStragglerIsFlaggedAfterTheWindowAndClearedAfterItRecovers) {
  metrics_.OnJobStateChanged(JobIn(moe::v1::SCHEDULED, 1, {"r0", "r0", "r0"}), moe::v1::PENDING);
  std::vector<StragglerChange> changes;
  for (int step = 1; step <= 2; ++step) Step(1, step, {0.1, 0.1, 0.5}, &changes);
  EXPECT_TRUE(changes.empty()) << "two slow steps are not yet a straggler";
  EXPECT_EQ(Get("moe_job_straggler", {{"job_id", "j"}, {"rank", "2"}}), 0.0);
  auto out = Step(1, 3, {0.1, 0.1, 0.5}, &changes);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 2);
  EXPECT_TRUE(changes[0].flagged);
  EXPECT_NEAR(changes[0].ratio, 5.0, 1e-9);
  ASSERT_EQ(out->stragglers_size(), 1);
  EXPECT_EQ(out->stragglers(0), 2);
  EXPECT_EQ(Get("moe_job_straggler", {{"job_id", "j"}, {"rank", "2"}}), 1.0);
  EXPECT_EQ(metrics_.Stragglers("j"), (std::set<int>{2}));
  changes.clear();
  for (int step = 4; step <= 6; ++step) Step(1, step, {0.1, 0.1, 0.11}, &changes);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].flagged);
  EXPECT_EQ(Get("moe_job_straggler", {{"job_id", "j"}, {"rank", "2"}}), 0.0);
  EXPECT_TRUE(metrics_.Stragglers("j").empty());
}

TEST_F(MetricsAggregatorTest, TheJobsStateAndRestartsFollowItsEvents) {
  moe::v1::Job job = JobIn(moe::v1::PENDING, 0, {});
  metrics_.OnJobStateChanged(job, moe::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(Get("moe_job_state", {{"job_id", "j"}, {"state", "PENDING"}}), 1.0);
  EXPECT_EQ(Get("moe_job_state", {{"job_id", "j"}, {"state", "RUNNING"}}), 0.0)
      << "RUNNING's from the start: the checkpoint alert's min_over_time reads its 0";
  EXPECT_FALSE(Get("moe_job_state", {{"job_id", "j"}, {"state", "SCHEDULED"}}).has_value())
      << "the others once the job enters them";
  job = JobIn(moe::v1::RESTARTING, 1, {"r0"});
  metrics_.OnJobStateChanged(job, moe::v1::RUNNING);
  EXPECT_EQ(Get("moe_job_restarts_total", {{"job_id", "j"}}), 0.0)
      << "a requeue (a worker left cleanly) is no restart";
  job.set_restarts(1);
  metrics_.OnJobStateChanged(job, moe::v1::RUNNING);
  EXPECT_EQ(Get("moe_job_restarts_total", {{"job_id", "j"}}), 1.0);
  EXPECT_EQ(Get("moe_job_state", {{"job_id", "j"}, {"state", "PENDING"}}), 0.0) << "left";
  EXPECT_EQ(Get("moe_job_state", {{"job_id", "j"}, {"state", "RESTARTING"}}), 1.0);
  EXPECT_FALSE(Get("moe_job_state", {{"job_id", "j"}, {"state", "FAILED"}}).has_value());
  metrics_.OnJobStateChanged(job, moe::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(Get("moe_job_restarts_total", {{"job_id", "j"}}), 1.0)
      << "loading a restarting job is no new restart";
}

TEST_F(MetricsAggregatorTest, AJobLoadedWhileRunningTakesReportsOfItsAttempt) {
  metrics_.OnJobStateChanged(JobIn(moe::v1::RUNNING, 3, {"r0", "r1"}),
                             moe::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_TRUE(Step(3, 10, {0.1, 0.1}).has_value());
}

TEST_F(MetricsAggregatorTest, AnEndedJobsSeriesGoAfterTheRetentionTime) {
  metrics_.OnJobStateChanged(JobIn(moe::v1::SCHEDULED, 1, {"r0"}), moe::v1::PENDING);
  ASSERT_TRUE(Step(1, 1, {0.1}).has_value());
  EXPECT_TRUE(Get("moe_rank_tflops", RankL(0, "r0")).has_value());
  metrics_.OnJobStateChanged(JobIn(moe::v1::SUCCEEDED, 1, {"r0"}), moe::v1::RUNNING);
  // Its throughput goes at once: a rack's TFLOP/s (the sum of moe_rank_tflops) is what runs now.
  EXPECT_FALSE(Get("moe_rank_tflops", RankL(0, "r0")).has_value());
  EXPECT_FALSE(Get("moe_job_tflops_per_device", {{"job_id", "j"}}).has_value());
  EXPECT_FALSE(Get("moe_job_mfu_ratio", {{"job_id", "j"}}).has_value());
  clock_.Advance(59);
  metrics_.Expire();
  EXPECT_TRUE(Get("moe_job_loss", {{"job_id", "j"}}).has_value()) << "its history is kept for 60 s";
  clock_.Advance(2);
  metrics_.Expire();
  EXPECT_FALSE(Get("moe_job_loss", {{"job_id", "j"}}).has_value());
  EXPECT_FALSE(Get("moe_job_state", {{"job_id", "j"}, {"state", "SUCCEEDED"}}).has_value());
  EXPECT_FALSE(Get("moe_rank_tflops", RankL(0, "r0")).has_value());
}

TEST_F(MetricsAggregatorTest, BuildInfoWorkersAndTheQueue) {
  EXPECT_EQ(Get("moe_build_info", {{"version", "9.9.9"}}), 1.0);
  std::vector<moe::v1::Worker> workers(3);
  workers[0].set_rack("r0");
  workers[0].set_state(moe::v1::IDLE);
  workers[1].set_rack("r0");
  workers[1].set_state(moe::v1::IDLE);
  workers[2].set_rack("r1");
  workers[2].set_state(moe::v1::LOST);
  metrics_.SetWorkers(workers);
  EXPECT_EQ(Get("moe_workers", {{"state", "idle"}, {"rack", "r0"}}), 2.0);
  EXPECT_EQ(Get("moe_workers", {{"state", "busy"}, {"rack", "r0"}}), 0.0)
      << "every state shows for every rack";
  EXPECT_EQ(Get("moe_workers", {{"state", "lost"}, {"rack", "r1"}}), 1.0);
  workers[0].set_state(moe::v1::BUSY);
  workers[0].set_drained(true);  // drained while its rank still runs
  metrics_.SetWorkers(workers);
  EXPECT_EQ(Get("moe_workers", {{"state", "draining"}, {"rack", "r0"}}), 1.0);
  EXPECT_EQ(Get("moe_workers", {{"state", "busy"}, {"rack", "r0"}}), 0.0)
      << "a draining worker is not counted busy";
  metrics_.SetWorkers({});
  EXPECT_EQ(Get("moe_workers", {{"state", "lost"}, {"rack", "r1"}}), 0.0) << "back to 0, not gone";
  metrics_.SetQueueLength(4);
  EXPECT_EQ(Get("moe_scheduler_queue_length", {}), 4.0);
  metrics_.ObserveSchedulerDecision(0.001);
  EXPECT_EQ(Get("moe_scheduler_decision_duration_seconds", {}), 1.0);
}

TEST_F(MetricsAggregatorTest, CheckpointStepAgeAndTheLastSavesStall) {
  moe::v1::Job job = JobIn(moe::v1::SCHEDULED, 1, {"r0"});
  metrics_.OnJobStateChanged(job, moe::v1::PENDING);
  metrics_.SetCheckpoint(job, clock_.Now());
  EXPECT_EQ(Get("moe_job_checkpoint_step", {{"job_id", "j"}}), 0.0) << "none yet";
  EXPECT_FALSE(Get("moe_job_checkpoint_age_seconds", {{"job_id", "j"}}).has_value())
      << "no step reported yet: no age";
  job.set_checkpoint_step(100);
  job.set_checkpoint_time(clock_.Now() - 7200);
  metrics_.SetCheckpoint(job, clock_.Now());
  EXPECT_EQ(Get("moe_job_checkpoint_step", {{"job_id", "j"}}), 100.0);
  EXPECT_EQ(Get("moe_job_checkpoint_age_seconds", {{"job_id", "j"}}), 7200.0);
  moe::v1::StepMetrics m = Report(101, 0.1);
  m.set_checkpoint_stall_seconds(3.5);
  ASSERT_TRUE(metrics_.OnStep("j", 1, 0, m, nullptr).has_value());
  EXPECT_EQ(Get("moe_job_checkpoint_save_seconds", {{"job_id", "j"}}), 3.5);
  ASSERT_TRUE(metrics_.OnStep("j", 1, 0, Report(102, 0.1), nullptr).has_value());
  EXPECT_EQ(Get("moe_job_checkpoint_save_seconds", {{"job_id", "j"}}), 3.5)
      << "a step without a save keeps the last save's figure";
  metrics_.OnJobStateChanged(JobIn(moe::v1::SUCCEEDED, 1, {"r0"}), moe::v1::RUNNING);
  EXPECT_FALSE(Get("moe_job_checkpoint_age_seconds", {{"job_id", "j"}}).has_value())
      << "an ended job has no work to lose";
  EXPECT_EQ(Get("moe_job_checkpoint_step", {{"job_id", "j"}}), 100.0) << "kept for the retention";
  clock_.Advance(61);
  metrics_.Expire();
  EXPECT_FALSE(Get("moe_job_checkpoint_step", {{"job_id", "j"}}).has_value());
  EXPECT_FALSE(Get("moe_job_checkpoint_save_seconds", {{"job_id", "j"}}).has_value());
  moe::v1::Job other = JobIn(moe::v1::RUNNING, 1, {"r0"});
  other.set_id("never-seen");
  metrics_.SetCheckpoint(other, clock_.Now());
  EXPECT_FALSE(Get("moe_job_checkpoint_step", {{"job_id", "never-seen"}}).has_value())
      << "no series for a job the aggregator does not show";
}

TEST_F(MetricsAggregatorTest, FinishedJobsAreCountedOnceByFinalState) {
  for (const char* st : {"SUCCEEDED", "FAILED", "CANCELLED"})
    EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", st}}), 0.0) << st << " from the start";
  metrics_.OnJobStateChanged(JobIn(moe::v1::SUCCEEDED, 1, {"r0"}), moe::v1::RUNNING);
  EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1.0);
  // A restarted controller loads the job in its final state: not counted again.
  metrics_.OnJobStateChanged(JobIn(moe::v1::SUCCEEDED, 1, {"r0"}), moe::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1.0);
  moe::v1::Job k = JobIn(moe::v1::CANCELLED, 0, {});
  k.set_id("k");
  metrics_.OnJobStateChanged(k, moe::v1::PENDING);
  EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", "CANCELLED"}}), 1.0);
  moe::v1::Job f = JobIn(moe::v1::FAILED, 2, {"r0"});
  f.set_id("f");
  metrics_.OnJobStateChanged(f, moe::v1::RESTARTING);
  EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", "FAILED"}}), 1.0);
  metrics_.OnJobStateChanged(JobIn(moe::v1::RESTARTING, 2, {"r0"}), moe::v1::RUNNING);
  EXPECT_EQ(Get("moe_jobs_finished_total", {{"state", "FAILED"}}), 1.0) << "a restart is no end";
}

TEST_F(MetricsAggregatorTest, QueuesQuotaUsageBorrowedAndPending) {
  std::vector<moe::v1::QueueStatus> queues(2);
  queues[0].set_name("research");
  queues[0].set_pending_jobs(3);
  auto* r = queues[0].add_resources();
  r->set_device("cuda");
  r->set_nominal(64);
  r->set_used(80);
  r->set_borrowed(16);
  queues[1].set_name("default");  // no --queues file: unlimited
  r = queues[1].add_resources();
  r->set_device("cpu");
  r->set_nominal(-1);
  r->set_used(2);
  metrics_.SetQueues(queues);
  const Labels research = {{"queue", "research"}, {"device", "cuda"}};
  EXPECT_EQ(Get("moe_queue_quota", research), 64.0);
  EXPECT_EQ(Get("moe_queue_usage", research), 80.0);
  EXPECT_EQ(Get("moe_queue_borrowed", research), 16.0);
  EXPECT_EQ(Get("moe_queue_pending_jobs", {{"queue", "research"}}), 3.0);
  const Labels dflt = {{"queue", "default"}, {"device", "cpu"}};
  EXPECT_FALSE(Get("moe_queue_quota", dflt).has_value()) << "no quota: no series, not -1";
  EXPECT_EQ(Get("moe_queue_usage", dflt), 2.0);
  queues[1].clear_resources();  // the default queue's jobs ended: no device listed
  metrics_.SetQueues(queues);
  EXPECT_EQ(Get("moe_queue_usage", dflt), 0.0) << "back to 0, not gone";
  EXPECT_EQ(Get("moe_queue_borrowed", dflt), 0.0);
}

TEST_F(MetricsAggregatorTest, RackSparesPerRackGoBackToZeroWhenTheRackGoes) {
  EXPECT_EQ(Get("moe_rack_spares", {{"rack", "r0"}}), std::nullopt) << "none before a count";
  std::map<std::string, RackCount> racks;
  racks["r0"].spares = 1;
  racks["r0"].spares_in_use = 1;
  racks["r1"].spares = 2;
  metrics_.SetRackSpares(racks);
  EXPECT_EQ(Get("moe_rack_spares", {{"rack", "r0"}}), 1.0);
  EXPECT_EQ(Get("moe_rack_spares_in_use", {{"rack", "r0"}}), 1.0);
  EXPECT_EQ(Get("moe_rack_spares", {{"rack", "r1"}}), 2.0);
  EXPECT_EQ(Get("moe_rack_spares_in_use", {{"rack", "r1"}}), 0.0);
  racks.erase("r0");
  metrics_.SetRackSpares(racks);
  EXPECT_EQ(Get("moe_rack_spares", {{"rack", "r0"}}), 0.0) << "back to 0, not gone";
  EXPECT_EQ(Get("moe_rack_spares_in_use", {{"rack", "r0"}}), 0.0);
}

// A job's throughput lives exactly as long as its ranks run: preempted, requeued (RESTARTING),
// told to stop (STOPPING) or ended, its rank and job TFLOP/s and FLOP/s go at once, and a step that
// a stopping rank reports afterwards sets none (a rack's sum is of running jobs only); its counters
// still add up. A new attempt exports again.
TEST_F(MetricsAggregatorTest, AJobThatStopsRunningLeavesNoThroughputSeries) {
  for (const auto stopped : {moe::v1::PREEMPTED, moe::v1::RESTARTING, moe::v1::STOPPING}) {
    SCOPED_TRACE(moe::v1::JobState_Name(stopped));
    const int attempt = static_cast<int>(stopped);  // a fresh attempt per case
    metrics_.OnJobStateChanged(JobIn(moe::v1::SCHEDULED, attempt, {"r0", "r1"}), moe::v1::PENDING);
    metrics_.OnJobStateChanged(JobIn(moe::v1::RUNNING, attempt, {"r0", "r1"}), moe::v1::SCHEDULED);
    ASSERT_TRUE(Step(attempt, 1, {0.2, 0.2}).has_value());
    EXPECT_EQ(Get("moe_rank_tflops", RankL(1, "r1")), 120.0);
    EXPECT_EQ(Get("moe_rank_flops_per_second", RankL(1, "r1")), 120e12) << "base units";
    EXPECT_EQ(Get("moe_job_device_flops_per_second", {{"job_id", "j"}}), 120e12);
    metrics_.OnJobStateChanged(JobIn(stopped, attempt, {"r0", "r1"}), moe::v1::RUNNING);
    const double tokens = *Get("moe_job_tokens_total", {{"job_id", "j"}});
    ASSERT_TRUE(Step(attempt, 2, {0.2, 0.2}).has_value()) << "a late report of a stopping rank";
    for (int r = 0; r < 2; ++r) {
      EXPECT_FALSE(Get("moe_rank_tflops", RankL(r, r ? "r1" : "r0")).has_value()) << r;
      EXPECT_FALSE(Get("moe_rank_flops_per_second", RankL(r, r ? "r1" : "r0")).has_value()) << r;
    }
    for (const char* name : {"moe_job_tflops_per_device", "moe_job_device_flops_per_second",
                             "moe_job_mfu_ratio", "moe_job_peak_tflops_per_device"}) {
      EXPECT_FALSE(Get(name, {{"job_id", "j"}}).has_value()) << name;
    }
    EXPECT_EQ(Get("moe_job_tokens_total", {{"job_id", "j"}}), tokens + 4096)
        << "the step still counts in the job's totals";
    EXPECT_TRUE(Get("moe_job_loss", {{"job_id", "j"}}).has_value()) << "its history stays";
  }
}

TEST_F(MetricsAggregatorTest, ADeletedJobsSeriesGoAtOnce) {
  moe::v1::Job job = JobIn(moe::v1::SCHEDULED, 1, {"r0"});
  metrics_.OnJobStateChanged(job, moe::v1::PENDING);
  ASSERT_TRUE(Step(1, 1, {0.1}).has_value());
  moe::v1::Goodput g;
  g.set_ratio(0.5);
  metrics_.SetGoodput("j", g);
  job.set_state(moe::v1::SUCCEEDED);
  metrics_.OnJobStateChanged(job, moe::v1::RUNNING);
  ASSERT_TRUE(Get("moe_job_goodput_ratio", {{"job_id", "j"}}).has_value());
  metrics_.OnJobDeleted("j");
  for (const char* name : {"moe_job_goodput_ratio", "moe_job_loss", "moe_job_tokens_total"})
    EXPECT_FALSE(Get(name, {{"job_id", "j"}}).has_value()) << name << " outlived the delete";
  EXPECT_FALSE(Get("moe_job_state", {{"job_id", "j"}, {"state", "SUCCEEDED"}}).has_value());
  metrics_.OnJobDeleted("j");  // twice, or a job never shown: nothing to do
  metrics_.OnJobDeleted("never-seen");
}

// moe_job_info to join on (name, queue, user, priority), and each placement's wait in its queue's
// admission histogram: from entering the queue (submit, preemption) to SCHEDULED.
TEST_F(MetricsAggregatorTest, JobInfoAndTheAdmissionWaitByQueue) {
  metrics_.SetDefaultQueue("research");
  moe::v1::Job job = JobIn(moe::v1::PENDING, 0, {});
  job.set_owner("alice");
  job.mutable_spec()->mutable_metadata()->set_name("pretrain");
  job.mutable_spec()->mutable_metadata()->set_priority(7);
  job.set_updated_at(1000);
  metrics_.OnJobStateChanged(job, moe::v1::JOB_STATE_UNSPECIFIED);
  const Labels info = {{"job_id", "j"},
                       {"name", "pretrain"},
                       {"queue", "research"},
                       {"user", "alice"},
                       {"priority", "7"}};
  EXPECT_EQ(Get("moe_job_info", info), 1.0) << "a job naming no queue is in the default one";
  moe::v1::Job placed = JobIn(moe::v1::SCHEDULED, 1, {"r0"});
  *placed.mutable_spec() = job.spec();
  placed.set_owner("alice");
  placed.set_updated_at(1030);
  metrics_.OnJobStateChanged(placed, moe::v1::PENDING);
  EXPECT_EQ(Get("moe_queue_admission_wait_seconds", {{"queue", "research"}}), 1.0);
  const std::string page = prometheus::TextSerializer().Serialize(registry_->Collect());
  EXPECT_NE(page.find("moe_queue_admission_wait_seconds_sum{queue=\"research\"} 30"),
            std::string::npos)
      << "30 s from submit to placement";
  // Preempted at 2000, placed again at 2100: a second wait of 100 s.
  placed.set_state(moe::v1::PREEMPTED);
  placed.set_updated_at(2000);
  metrics_.OnJobStateChanged(placed, moe::v1::RUNNING);
  placed.set_state(moe::v1::SCHEDULED);
  placed.set_attempt(2);
  placed.set_updated_at(2100);
  metrics_.OnJobStateChanged(placed, moe::v1::PREEMPTED);
  EXPECT_EQ(Get("moe_queue_admission_wait_seconds", {{"queue", "research"}}), 2.0);
  metrics_.OnJobDeleted("j");
  EXPECT_FALSE(Get("moe_job_info", info).has_value());
}

// Queued jobs by why they wait, and the oldest wait per reason: what the queue alerts read (a full
// quota is not paged; a job that waits with quota and capacity is).
TEST_F(MetricsAggregatorTest, WaitingJobsAndTheOldestWaitByReason) {
  metrics_.SetWaitSlos({{"research", 600}, {"batch", 0}});
  EXPECT_EQ(Get("moe_queue_wait_slo_seconds", {{"queue", "research"}}), 600.0);
  EXPECT_FALSE(Get("moe_queue_wait_slo_seconds", {{"queue", "batch"}}).has_value())
      << "no SLO, no series (no alert)";
  for (const char* id : {"a", "b", "c"}) {
    moe::v1::Job job;
    job.set_id(id);
    job.set_state(moe::v1::PENDING);
    job.mutable_spec()->mutable_metadata()->set_queue("research");
    job.set_updated_at(id[0] == 'a' ? 1000 : 1500);
    metrics_.OnJobStateChanged(job, moe::v1::JOB_STATE_UNSPECIFIED);
  }
  metrics_.SetWaiting({{"a", "quota"}, {"b", "quota"}, {"c", "preempting"}}, 2000);
  EXPECT_EQ(Get("moe_queue_waiting_jobs", {{"queue", "research"}, {"reason", "quota"}}), 2.0);
  EXPECT_EQ(Get("moe_queue_oldest_wait_seconds", {{"queue", "research"}, {"reason", "quota"}}),
            1000.0);
  EXPECT_EQ(Get("moe_queue_oldest_wait_seconds", {{"queue", "research"}, {"reason", "preempting"}}),
            500.0);
  EXPECT_EQ(Get("moe_queue_waiting_jobs", {{"queue", "research"}, {"reason", "busy"}}), 0.0)
      << "every reason of a known queue is exported";
  metrics_.SetWaiting({}, 2001);
  EXPECT_EQ(Get("moe_queue_waiting_jobs", {{"queue", "research"}, {"reason", "quota"}}), 0.0)
      << "placed: back to 0, not left at the last count";
  EXPECT_EQ(Get("moe_queue_oldest_wait_seconds", {{"queue", "research"}, {"reason", "quota"}}),
            0.0);
}

}  // namespace
}  // namespace moe::controller
