// Goodput accounting (controller/goodput.h) on explicit times: every second of a job's wall time
// counted once, productive or lost to its cause.
#include "controller/goodput.h"

#include <gtest/gtest.h>

namespace moe::controller {
namespace {

using moe::v1::Job;

void Enter(Job& job, moe::v1::JobState to, double now) {
  job.set_state(to);
  GoodputOnState(job, now);
}

void StepAt(Job& job, int64_t step, double now, double checkpoint = 0, double eval = 0) {
  moe::v1::StepMetrics m;
  m.set_step(step);
  m.set_checkpoint_stall_seconds(checkpoint);
  m.set_eval_seconds(eval);
  GoodputOnStep(job, m, now);
}

double Sum(const moe::v1::Goodput& g) {
  double s = g.productive_seconds();
  for (const char* c : kGoodputCauses) s += GoodputLost(g, c);
  return s;
}

// Submitted at 0, placed at 10, its first step reported at 15, then a step a second to step 10.
Job RunToStep10() {
  Job job;
  job.set_state(moe::v1::PENDING);
  GoodputOnState(job, 0);
  Enter(job, moe::v1::SCHEDULED, 10);
  Enter(job, moe::v1::RUNNING, 15);
  StepAt(job, 1, 15);
  for (int s = 2; s <= 10; ++s) StepAt(job, s, 15 + (s - 1));
  return job;
}

TEST(Goodput, QueuedStartingAndProductiveAddUpToTheWallTime) {
  const Job job = RunToStep10();
  const moe::v1::Goodput& g = job.goodput();
  EXPECT_DOUBLE_EQ(g.queued_seconds(), 10);
  EXPECT_DOUBLE_EQ(g.starting_seconds(), 5) << "placement to the first step's report";
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 9);
  EXPECT_DOUBLE_EQ(g.wall_seconds(), 24);
  EXPECT_DOUBLE_EQ(g.ratio(), 9.0 / 24);
  EXPECT_DOUBLE_EQ(Sum(g), g.wall_seconds());
  EXPECT_EQ(g.counted_step(), 10);
}

TEST(Goodput, AFailureCostsTheCutStepTheBackoffAndTheStepsRedoneSinceTheCheckpoint) {
  Job job = RunToStep10();
  // Fails half a step after step 10; the restart waits 6 s, then 1.5 s for workers; its first
  // report (step 6: it resumed from the checkpoint of step 5) comes 2 s after its placement.
  GoodputSetBackoff(job, 30.5);
  Enter(job, moe::v1::RESTARTING, 24.5);
  Enter(job, moe::v1::SCHEDULED, 32);
  Enter(job, moe::v1::RUNNING, 34);
  StepAt(job, 6, 34);
  for (int s = 7; s <= 12; ++s) StepAt(job, s, 34 + (s - 6));
  const moe::v1::Goodput& g = job.goodput();
  EXPECT_DOUBLE_EQ(g.backoff_seconds(), 6);
  EXPECT_DOUBLE_EQ(g.queued_seconds(), 10 + 1.5);
  EXPECT_DOUBLE_EQ(g.starting_seconds(), 5 + 2);
  EXPECT_DOUBLE_EQ(g.redone_seconds(), 0.5 + 4) << "the cut step, then steps 7-10 again";
  EXPECT_DOUBLE_EQ(g.productive_seconds(), 9 + 2) << "steps 11 and 12";
  EXPECT_DOUBLE_EQ(Sum(g), 40);
  EXPECT_DOUBLE_EQ(g.wall_seconds(), 40);
}

TEST(Goodput, SavesAndValidationAreCarvedOutOfTheirStepsInterval) {
  Job job = RunToStep10();
  StepAt(job, 11, 25.5, /*checkpoint=*/0.3, /*eval=*/0.2);  // a 1.5 s interval
  const moe::v1::Goodput& g = job.goodput();
  EXPECT_NEAR(g.checkpoint_seconds(), 0.3, 1e-12);
  EXPECT_NEAR(g.evaluation_seconds(), 0.2, 1e-12);
  EXPECT_NEAR(g.productive_seconds(), 9 + 1.0, 1e-12);
  StepAt(job, 12, 26.0, /*checkpoint=*/5, /*eval=*/5);
  EXPECT_NEAR(g.checkpoint_seconds(), 0.3 + 0.5, 1e-12) << "no more than the interval itself";
  EXPECT_NEAR(Sum(g), 26.0, 1e-12);
}

TEST(Goodput, TheEndOfAnAttemptIsTheFinalSaveOrThePreemptionsStop) {
  Job done = RunToStep10();
  Enter(done, moe::v1::SUCCEEDED, 26);
  EXPECT_DOUBLE_EQ(done.goodput().checkpoint_seconds(), 2) << "after the last step: its final save";
  EXPECT_EQ(done.goodput().open_cause(), "");
  Enter(done, moe::v1::SUCCEEDED, 100);  // nothing counts after the end
  EXPECT_DOUBLE_EQ(done.goodput().wall_seconds(), 26);

  Job preempted = RunToStep10();
  Enter(preempted, moe::v1::PREEMPTED, 25);
  Enter(preempted, moe::v1::SCHEDULED, 40);
  EXPECT_DOUBLE_EQ(preempted.goodput().preempted_seconds(), 1 + 15);
}

TEST(Goodput, ReadingBringsAWaitUpToNowWithoutChangingTheRecord) {
  Job job;
  job.set_state(moe::v1::PENDING);
  GoodputOnState(job, 100);
  const moe::v1::Goodput now = GoodputAt(job, 107);
  EXPECT_DOUBLE_EQ(now.queued_seconds(), 7);
  EXPECT_DOUBLE_EQ(now.ratio(), 0);
  EXPECT_DOUBLE_EQ(job.goodput().queued_seconds(), 0) << "the record moves at changes and steps";
  // A running attempt's unreported step is not counted yet (it may turn out to be redone).
  Job running = RunToStep10();
  EXPECT_DOUBLE_EQ(GoodputAt(running, 30).wall_seconds(), 24);
}

TEST(Goodput, AJobStoredBeforeGoodputStartsItsAccountAtItsNextChange) {
  Job old;
  old.set_state(moe::v1::RUNNING);
  old.set_state(moe::v1::RESTARTING);
  GoodputOnState(old, 500);
  EXPECT_DOUBLE_EQ(old.goodput().wall_seconds(), 0);
  EXPECT_DOUBLE_EQ(old.goodput().mark(), 500);
  EXPECT_EQ(old.goodput().open_cause(), "queued");
}

TEST(CheckpointAdvice, YoungDalyFromTheJobsOwnMeasurements) {
  Job job;
  job.set_attempt(2);
  job.mutable_summary()->set_measured_steps(100);
  job.mutable_summary()->set_step_seconds_sum(200);  // 2 s a step
  moe::v1::Goodput& g = *job.mutable_goodput();
  g.set_counted_step(100);
  g.set_checkpoint_seconds(5);  // 10 saves at interval 10: 0.5 s each
  g.set_starting_seconds(60);   // 30 s per attempt
  moe::v1::CheckpointAdvice a;
  EXPECT_FALSE(AdviseFromRun(job, 1000, 10, 0, &a)) << "no MTBF, no advice";
  ASSERT_TRUE(AdviseFromRun(job, 1000, 10, 50000, &a));
  // System MTBF 50000 h x 3600 / 1000 devices = 180000 s; sqrt(2 x 0.5 x 180000) = 424.3 s of work,
  // 212 steps of 2 s.
  EXPECT_DOUBLE_EQ(a.step_seconds(), 2);
  EXPECT_DOUBLE_EQ(a.stall_seconds(), 0.5);
  EXPECT_DOUBLE_EQ(a.restart_seconds(), 30);
  EXPECT_NEAR(a.young_daly_seconds(), 424.26, 0.01);
  EXPECT_EQ(a.interval_steps(), 212);
  // Goodput at the advice: 1 - 0.5/424 - (424/2)/180000 - 30/180000, and better than every 10 steps
  // (0.5 s lost every 20 s).
  EXPECT_NEAR(a.goodput(), 1 - 0.5 / 424 - 212.0 / 180000 - 30.0 / 180000, 1e-4);
  EXPECT_EQ(a.current_interval_steps(), 10);
  EXPECT_NEAR(a.current_goodput(), 1 - 0.5 / 20 - 10.0 / 180000 - 30.0 / 180000, 1e-4);
  EXPECT_GT(a.goodput(), a.current_goodput());
  // Before a measured step there is nothing to advise from.
  job.mutable_summary()->set_measured_steps(0);
  EXPECT_FALSE(AdviseFromRun(job, 1000, 10, 50000, &a));
}

}  // namespace
}  // namespace moe::controller
