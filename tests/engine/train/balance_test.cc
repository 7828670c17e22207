// Aux-loss-free balancing: with the bias updates on, the expert load (max/mean tokens per expert)
// after 200 steps is clearly lower than with them off.
#include <gtest/gtest.h>

#include <numeric>

#include "common/file_util.h"
#include "common/log.h"
#include "tests/engine/train_helpers.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

// Mean over the last 20 steps of the per-step imbalance.
double FinalImbalance(JobSpec spec, double rate) {
  spec.model.moe.bias_update_rate = rate;
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.peak_flops = 1e11;
  o.log_steps = false;
  std::vector<double> imb;
  o.on_step = [&](const train::StepMetrics& m) { imb.push_back(m.expert_load_imbalance); };
  auto r = train::Train(spec, local.ctx, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (imb.size() < 20) return 0;
  return std::accumulate(imb.end() - 20, imb.end(), 0.0) / 20;
}

TEST(Balance, BiasUpdatesLowerTheExpertLoadImbalance) {
  const std::string source = std::string(MOE_SOURCE_DIR) + "/data/fortunes";
  ASSERT_TRUE(PathExists(source + ".idx"))
      << "this test trains on the fortunes corpus: run `make data` first";
  JobSpec spec = testing::SmallJob(source, 2048);
  spec.model.vocab_size = 2048;
  spec.training.steps = 200;
  spec.optimizer.lr = 3e-3;
  spec.optimizer.warmup_steps = 20;
  const double off = FinalImbalance(spec, 0.0);
  const double on = FinalImbalance(spec, 1e-2);
  MOE_LOG(INFO) << "expert load max/mean over the last 20 of 200 steps: bias updates off " << off
                << ", on " << on;
  RecordProperty("imbalance_off", std::to_string(off));
  RecordProperty("imbalance_on", std::to_string(on));
  EXPECT_GT(off, 1.0);
  EXPECT_LT(on, 0.8 * off) << "bias updates should clearly lower the imbalance (off " << off
                           << ", on " << on << ")";
}

}  // namespace
}  // namespace moe
