// checkpoint.async end to end on one rank: asynchronous saves train and resume bitwise like
// synchronous ones, a kill -9 during the background write resumes from the previous checkpoint,
// and a failed background write costs that checkpoint only.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <functional>

#include "common/file_util.h"
#include "tests/engine/train_helpers.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

constexpr int64_t kSteps = 20, kInterval = 5;

struct TrainRun {
  std::vector<double> loss, grad_norm, checkpoint_stall, eval_seconds;
  std::vector<int64_t> steps, checkpoint_step;
};

TrainRun Train(const JobSpec& spec, const std::string& ckpt, bool resume) {
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.stop_at_step = kSteps;
  o.checkpoint_dir = ckpt;
  o.checkpoint_interval = kInterval;
  o.resume = resume;
  o.peak_flops = 1e11;  // skip the probe
  o.log_steps = false;
  TrainRun run;
  o.on_step = [&](const train::StepMetrics& m) {
    run.loss.push_back(m.loss);
    run.grad_norm.push_back(m.grad_norm);
    run.steps.push_back(m.step);
    run.checkpoint_stall.push_back(m.checkpoint_stall_seconds);
    run.eval_seconds.push_back(m.eval_seconds);
    run.checkpoint_step.push_back(m.checkpoint_step);
  };
  auto r = moe::train::Train(spec, local.ctx, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return run;
}

std::string StepDir(const std::string& dir, int64_t step) {
  return dir + "/" + checkpoint::CheckpointManager::StepDirName(step);
}

// The same 20 steps saved every 5 asynchronously and synchronously train alike bitwise and write
// the same shards byte for byte; a resume from the asynchronous step-10 checkpoint equals the
// synchronous run's steps 11..20 bitwise. The step after each save reports its stall, and a
// checkpoint counts as saved only once committed.
TEST(AsyncCheckpoint, ResumesBitwiseLikeSynchronousSaves) {
  const std::string base = "/tmp/moe-async-ckpt-test-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  ASSERT_TRUE(spec.checkpoint.async) << "checkpoint.async should default to true";
  JobSpec sync_spec = spec;
  sync_spec.checkpoint.async = false;
  TrainRun sync = Train(sync_spec, base + "/sync", false);
  TrainRun async = Train(spec, base + "/async", false);
  ASSERT_EQ(sync.loss.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(async.loss.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < sync.loss.size(); ++i) {
    EXPECT_EQ(async.loss[i], sync.loss[i]) << "step " << i + 1;
    EXPECT_EQ(async.grad_norm[i], sync.grad_norm[i]) << "step " << i + 1;
  }
  for (int64_t step = kInterval; step <= kSteps; step += kInterval) {
    auto a = ReadFileToString(StepDir(base + "/async", step) + "/shard_00000.bin");
    auto b = ReadFileToString(StepDir(base + "/sync", step) + "/shard_00000.bin");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(*a == *b) << "step " << step << ": the asynchronous shard differs";
  }
  // Stalls: none before the first save, some on the step after one (the copy to host memory).
  EXPECT_EQ(async.checkpoint_stall[0], 0.0);
  EXPECT_GT(async.checkpoint_stall[kInterval], 0.0) << "no stall reported for the first save";
  EXPECT_GT(sync.checkpoint_stall[kInterval], 0.0);
  // The synchronous save is committed at its step; the asynchronous one at a later boundary.
  EXPECT_EQ(sync.checkpoint_step[kInterval], kInterval);
  EXPECT_LE(async.checkpoint_step[kInterval], kInterval);
  EXPECT_EQ(async.checkpoint_step[kSteps - 1], kSteps - kInterval)
      << "the save before the last never committed";
  ASSERT_TRUE(RemoveAll(StepDir(base + "/async", 20)).ok());
  ASSERT_TRUE(RemoveAll(StepDir(base + "/async", 15)).ok());
  TrainRun resumed = Train(spec, base + "/async", true);
  ASSERT_EQ(resumed.steps.size(), 10u);
  EXPECT_EQ(resumed.steps.front(), 11);
  for (size_t i = 0; i < resumed.loss.size(); ++i)
    EXPECT_EQ(resumed.loss[i], sync.loss[10 + i]) << "step " << 11 + i << " after the resume";
  (void)RemoveAll(base);
}

// kill -9 while the background thread writes step 10's shard: no step_00000010 appears, step 5 is
// the newest checkpoint and the resume from it equals the straight run bitwise.
TEST(AsyncCheckpoint, AKillDuringTheBackgroundWriteResumesFromThePreviousCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The death test's child runs this test again from the start: it finds the parent's directory
  // in the environment.
  const char* inherited = std::getenv("MOE_ASYNC_CKPT_KILL_TEST_DIR");
  const std::string base = inherited != nullptr
                               ? inherited
                               : "/tmp/moe-async-ckpt-kill-test-" + std::to_string(::getpid());
  ::setenv("MOE_ASYNC_CKPT_KILL_TEST_DIR", base.c_str(), 1);
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  EXPECT_EXIT(
      {
        ::setenv("MOE_TEST_CHECKPOINT_WRITE_FAULT", "kill:10", 1);
        Train(spec, base + "/b", false);
        std::_Exit(0);  // not reached: the writer kills the process
      },
      ::testing::KilledBySignal(SIGKILL), "");
  ::unsetenv("MOE_ASYNC_CKPT_KILL_TEST_DIR");
  EXPECT_TRUE(PathExists(StepDir(base + "/b", 5)));
  EXPECT_FALSE(PathExists(StepDir(base + "/b", 10)));
  EXPECT_TRUE(PathExists(StepDir(base + "/b", 10) + ".tmp"))
      << "the kill came before the background write began";
  EXPECT_FALSE(PathExists(StepDir(base + "/b", 10) + ".tmp/shard_00000.bin"))
      << "the shard was complete: the kill was not mid-write";
  TrainRun straight = Train(spec, base + "/a", false);
  TrainRun resumed = Train(spec, base + "/b", true);
  ASSERT_EQ(resumed.steps.size(), 15u);
  EXPECT_EQ(resumed.steps.front(), 6);
  for (size_t i = 0; i < resumed.loss.size(); ++i)
    EXPECT_EQ(resumed.loss[i], straight.loss[5 + i]) << "step " << 6 + i << " after the resume";
  EXPECT_TRUE(PathExists(StepDir(base + "/b", 20)));
  (void)RemoveAll(base);
}

// A background write that fails (storage trouble on that save): the checkpoint is given up,
// training goes on unchanged, and the next saves are written. (With a validation pass every 10
// steps, whose time the step metrics report.)
TEST(AsyncCheckpoint, AFailedBackgroundWriteCostsThatCheckpointOnly) {
  const std::string base = "/tmp/moe-async-ckpt-fail-test-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  spec.training.eval_interval = 10;
  spec.data.split = "90,10,0";  // a validation split to evaluate on
  TrainRun straight = Train(spec, base + "/a", false);
  ::setenv("MOE_TEST_CHECKPOINT_WRITE_FAULT", "error:10", 1);
  TrainRun failed = Train(spec, base + "/b", false);
  ::unsetenv("MOE_TEST_CHECKPOINT_WRITE_FAULT");
  ASSERT_EQ(straight.loss.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(failed.loss.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < failed.loss.size(); ++i)
    EXPECT_EQ(failed.loss[i], straight.loss[i]) << "step " << i + 1;
  EXPECT_FALSE(PathExists(StepDir(base + "/b", 10)));
  EXPECT_FALSE(PathExists(StepDir(base + "/b", 10) + ".tmp")) << "the failed save was not removed";
  for (int64_t step : {5, 15, 20}) EXPECT_TRUE(PathExists(StepDir(base + "/b", step))) << step;
  EXPECT_EQ(failed.checkpoint_step[13], 5) << "a failed save reported as the newest checkpoint";
  EXPECT_EQ(failed.eval_seconds[8], 0.0) << "step 9 reports a validation pass";
  EXPECT_GT(failed.eval_seconds[9], 0.0) << "step 10's validation pass took no time";
  (void)RemoveAll(base);
}

}  // namespace
}  // namespace moe
