// Host synchronisations per training step (kernels::HostSyncs): the budget of the device-side step
// is one host read per MoE layer forward (its routing: the per-expert counts for the grouped GEMMs
// and the all-to-all's splits) and one at the end of the step (the losses and the squared gradient
// norms in one f64 buffer; clipping and the skip of a non-finite norm happen on the device). On the
// CPU stand-in the engine counts the points where the CUDA path waits, so CPU CI holds the budget.
// This layout has no collectives (W = 1); with them, each collective is one more
// (docs/architecture.md, "Host syncs").
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "kernels/elementwise.h"
#include "kernels/runtime.h"
#include "tests/engine/train_helpers.h"
#include "tests/testing/testing.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

// MoE layers a micro-batch's forward runs: the main model's and each MTP depth's (its block is an
// MoE block when the model's are).
int64_t MoeForwards(const ModelConfig& m) {
  return m.num_moe_layers() + (m.MtpIsMoe() ? m.mtp_depth : 0);
}

TEST(HostSyncs, AStepReadsOncePerMoeLayerAndOnceAtItsEnd) {
  const std::string base = "/tmp/moe-host-sync-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(base).ok());
  JobSpec spec = testing::SmallJob(testing::MakeMarkovDataset(base + "/data", 97, 60000, 3), 97);
  spec.training.steps = 5;
  spec.optimizer.grad_clip =
      1e-3;  // clipping on every step: the device-side clip must not read the norm
  const int64_t micro_batches = spec.data.global_batch_size / spec.data.micro_batch_size;
  const int64_t budget = MoeForwards(spec.model) * micro_batches + 1;
  ASSERT_EQ(budget, 7)
      << "3 MoE layer forwards x 2 micro-batches + 1: the case this test was written for";
  for (const std::string precision : {"fp32", "bf16"}) {
    parallel::LocalParallel local;
    train::TrainerOptions o;
    o.precision = precision;
    o.peak_flops = 1e11;
    o.log_steps = false;
    o.inject_nonfinite_grad_step = 4;  // a skipped update is decided on the device too
    std::vector<int64_t> syncs;
    std::vector<double> norms;
    o.on_step = [&](const train::StepMetrics& m) {
      syncs.push_back(m.host_syncs);
      norms.push_back(m.grad_norm);
    };
    auto r = train::Train(spec, local.ctx, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(syncs.size(), 5u);
    for (size_t i = 0; i < syncs.size(); ++i) {
      EXPECT_EQ(syncs[i], budget)
          << precision << " step " << i + 1 << ": the budget is " << budget
          << " (one routing read per MoE layer forward, one read at the end)";
    }
    EXPECT_TRUE(std::isnan(norms[3])) << "the injected non-finite norm reached the metrics";
    EXPECT_GT(norms[4], 0);
  }
  (void)RemoveAll(base);
}

// The counter is not blind: a forward-backward that returns its losses to the host (gradient
// checks, evaluation) waits for each of them, and the old per-parameter norm would wait once per
// tensor.
TEST(HostSyncs, HostValuedLossesAndNormsAreCounted) {
  parallel::LocalParallel local;
  ModelConfig cfg = *ModelPreset("tiny");
  cfg.vocab_size = 61;
  cfg.hidden_size = 32;
  cfg.num_heads = 2;
  cfg.num_layers = 3;
  model::Model model(cfg, local.ctx, 1, DType::kF32, Device::Cpu());
  Tensor tokens = Tensor::Zeros({2, 16}, DType::kI32),
         targets = Tensor::Zeros({2, 16}, DType::kI32);
  model::LossScales scales;
  scales.ce = 1.0 / 32;
  scales.aux_coeff = 1e-4;
  scales.mtp = {0.1 / 30};
  const int64_t before = kernels::HostSyncs();
  ASSERT_TRUE(model.ForwardBackward(tokens, targets, scales).ok());
  // Per MoE layer forward: its routing and its balance loss; then the main and the MTP
  // cross-entropy.
  EXPECT_EQ(kernels::HostSyncs() - before, 2 * MoeForwards(cfg) + 1 + cfg.mtp_depth);
  const int64_t mid = kernels::HostSyncs();
  double sq = 0;
  for (const auto& p : model.params().all()) sq += kernels::SumSquares(p->grad);
  EXPECT_GT(sq, 0);
  EXPECT_EQ(kernels::HostSyncs() - mid, static_cast<int64_t>(model.params().all().size()));
}

}  // namespace
}  // namespace moe
