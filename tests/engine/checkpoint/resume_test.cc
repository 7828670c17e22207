// 60 steps straight equals 30 steps + resume + 30 steps, bitwise (same thread count).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "common/file_util.h"
#include "tests/engine/train_helpers.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

struct TrainRun {
  std::vector<double> loss, grad_norm;
  std::vector<int64_t> steps;
};

TrainRun Train(const JobSpec& spec, int64_t stop, const std::string& ckpt, bool resume,
               std::function<bool()> should_stop = nullptr) {
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.stop_at_step = stop;
  o.checkpoint_dir = ckpt;
  o.checkpoint_interval = 30;
  o.resume = resume;
  o.should_stop = std::move(should_stop);
  o.peak_flops = 1e11;  // skip the probe
  o.log_steps = false;
  TrainRun run;
  o.on_step = [&](const train::StepMetrics& m) {
    run.loss.push_back(m.loss);
    run.grad_norm.push_back(m.grad_norm);
    run.steps.push_back(m.step);
  };
  auto r = moe::train::Train(spec, local.ctx, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return run;
}

TEST(Resume, ThirtyPlusThirtyEqualsSixtyBitwise) {
  const std::string base = "/tmp/moe-resume-test-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  spec.data.micro_batch_size = 2;  // 2 micro-batches per step: accumulation is covered too
  TrainRun straight = Train(spec, 60, base + "/a", false);
  TrainRun first = Train(spec, 30, base + "/b", false);
  TrainRun second = Train(spec, 60, base + "/b", true);
  ASSERT_EQ(straight.loss.size(), 60u);
  ASSERT_EQ(first.loss.size(), 30u);
  ASSERT_EQ(second.loss.size(), 30u);
  EXPECT_EQ(second.steps.front(), 31);
  for (size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(first.loss[i], straight.loss[i]) << "step " << i + 1;
    EXPECT_EQ(second.loss[i], straight.loss[30 + i]) << "step " << 31 + i << " after the resume";
    EXPECT_EQ(second.grad_norm[i], straight.grad_norm[30 + i]) << "step " << 31 + i;
  }
  EXPECT_LT(straight.loss.back(), straight.loss.front()) << "the model should be learning";
  (void)RemoveAll(base);
}

// Asked to stop at step 42 (a cancel, a worker's SIGTERM): the ranks checkpoint that boundary
// before they leave, so the resume starts at step 43, not at the last interval's 30, and still
// equals the straight run bitwise.
TEST(Resume, AStopCheckpointsWhereItStopsAndTheResumeLosesNothing) {
  const std::string base = "/tmp/moe-resume-stop-test-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  TrainRun straight = Train(spec, 50, base + "/a", false);
  int calls = 0;
  TrainRun first = Train(spec, 50, base + "/b", false, [&] { return ++calls > 42; });
  ASSERT_EQ(first.steps.back(), 42);
  EXPECT_TRUE(PathExists(base + "/b/" + checkpoint::CheckpointManager::StepDirName(42)))
      << "no checkpoint at the stop";
  TrainRun second = Train(spec, 50, base + "/b", true);
  ASSERT_FALSE(second.steps.empty());
  EXPECT_EQ(second.steps.front(), 43);
  for (size_t i = 0; i < second.loss.size(); ++i)
    EXPECT_EQ(second.loss[i], straight.loss[42 + i]) << "step " << 43 + i;
  // And the loss history beside the checkpoints: every step, the redone ones none (the stop lost
  // none).
  auto history = ReadFileToString(base + "/b/metrics.jsonl");
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(std::count(history->begin(), history->end(), '\n'), 50);
  (void)RemoveAll(base);
}

}  // namespace
}  // namespace moe
