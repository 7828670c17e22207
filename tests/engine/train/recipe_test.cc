// DeepSeek-V3's recipe in the trainer: the expert bias that steers selection whatever gamma is, no
// bias update on a skipped step, gamma, lambda and the learning rate scheduled in tokens, the
// batch-size ramp (and resuming in the middle of it), BF16 AdamW moments.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/file_util.h"
#include "tests/testing/testing.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace moe {
namespace {

// A small MLA + MTP job on synthetic tokens: no corpus needed.
JobSpec Job(int64_t steps) {
  JobSpec s;
  s.name = "recipe";
  s.model = *ModelPreset("tiny");
  s.model.vocab_size = 97;
  s.model.hidden_size = 32;
  s.model.num_heads = 2;
  s.model.num_layers = 3;
  s.model.dense_ffn_hidden = 48;
  s.model.moe.ffn_hidden = 16;
  s.data.source = "synthetic";
  s.data.seq_length = 16;
  s.data.micro_batch_size = 2;
  s.data.global_batch_size = 4;
  s.optimizer.warmup_steps = 2;
  s.training.steps = steps;
  s.training.log_interval = 1000;
  return s;
}

std::vector<std::vector<float>> Biases(model::Model& m) {
  std::vector<std::vector<float>> out;
  for (model::MoeLayer* l : m.moe_layers())
    out.push_back(l->bias().Clone(Device::Cpu()).ToVector<float>());
  return out;
}

struct TrainRun {
  std::vector<train::StepMetrics> steps;
  std::vector<std::vector<float>> bias;
};

TrainRun Train(const JobSpec& spec, train::TrainerOptions o = {}) {
  parallel::LocalParallel local;
  o.peak_flops = 1e9;
  o.log_steps = false;
  TrainRun r;
  o.on_step = [&](const train::StepMetrics& m) { r.steps.push_back(m); };
  auto t = train::Trainer::Create(spec, local.ctx, o);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  auto res = (*t)->Run();
  EXPECT_TRUE(res.ok()) << res.status();
  r.bias = Biases((*t)->model());
  return r;
}

// gamma = 0 freezes the bias; it still steers selection (DeepSeek-V3's last 500B tokens).
TEST(Recipe, ALearnedBiasSteersSelectionWithGammaZero) {
  ModelConfig cfg = Job(1).model;
  cfg.moe.bias_update_rate = 0;
  cfg.moe.top_k = 1;
  cfg.moe.num_groups = 1;
  cfg.moe.topk_groups = 1;
  cfg.mtp_depth = 0;
  ASSERT_TRUE(cfg.moe.has_bias());
  parallel::LocalParallel local;
  model::Model model(cfg, local.ctx, 3, DType::kF32, Device::Cpu());
  std::vector<float> bias(8, 0.f);
  bias[5] = 10.f;
  for (model::MoeLayer* l : model.moe_layers()) l->SetBias(bias);
  Tensor tokens = testing::RandomInts({2, 16}, 1, 97),
         targets = testing::RandomInts({2, 16}, 2, 97);
  model::LossScales scales{.ce = 1.0 / 32, .mtp = {}, .aux_coeff = 0};
  auto r = model.ForwardBackward(tokens, targets, scales);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const auto& counts : r->tokens_per_expert)
    EXPECT_EQ(counts[5], 32) << "every token goes where the bias says";
  // A model without a bias (expert_bias: false) ignores the tensor.
  cfg.moe.expert_bias = false;
  model::Model plain(cfg, local.ctx, 3, DType::kF32, Device::Cpu());
  for (model::MoeLayer* l : plain.moe_layers()) l->SetBias(bias);
  auto p = plain.ForwardBackward(tokens, targets, scales);
  ASSERT_TRUE(p.ok());
  for (const auto& counts : p->tokens_per_expert) EXPECT_LT(counts[5], 32);
}

// A step whose update is skipped (non-finite gradient norm) does not move the bias either.
TEST(Recipe, ASkippedStepLeavesTheBiasUnchanged) {
  JobSpec spec = Job(4);
  spec.model.moe.bias_update_rate = 0.05;
  train::TrainerOptions o;
  o.stop_at_step = 2;
  const TrainRun two = Train(spec, o);
  o.stop_at_step = 3;
  o.inject_nonfinite_grad_step = 3;
  const TrainRun skipped = Train(spec, o);
  ASSERT_EQ(skipped.steps.size(), 3u);
  EXPECT_TRUE(std::isnan(skipped.steps[2].grad_norm));
  EXPECT_EQ(skipped.bias, two.bias) << "the skipped step moved the bias";
  o.inject_nonfinite_grad_step = 0;
  const TrainRun three = Train(spec, o);
  EXPECT_NE(three.bias, two.bias) << "an ordinary step moves it";
}

TEST(Recipe, GammaLambdaAndTheLearningRateFollowTheirScheduleInTokens) {
  JobSpec spec = Job(6);
  const double per_step = 4 * 16;  // global batch x seq
  spec.model.moe.bias_update_schedule = {{.until_tokens = 2 * per_step, .value = 0.05},
                                         {.value = 0}};
  spec.model.mtp_loss_weight_schedule = {{.until_tokens = 3 * per_step, .value = 0.3},
                                         {.value = 0.1}};
  spec.optimizer.lr_schedule = {
      {.until_tokens = 2 * per_step, .shape = "linear", .from = 0, .to = 1e-3},
      {.until_tokens = 4 * per_step, .shape = "constant", .value = 1e-3},
      {.until_tokens = 6 * per_step, .shape = "cosine", .from = 1e-3, .to = 1e-4}};
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  train::TrainerOptions o;
  o.stop_at_step = 2;
  const TrainRun two = Train(spec, o);
  o.stop_at_step = 6;
  const TrainRun six = Train(spec, o);
  ASSERT_EQ(six.steps.size(), 6u);
  // The step after T tokens uses the schedule at T: steps 1 and 2 are in the first segments.
  EXPECT_DOUBLE_EQ(six.steps[0].lr, 0.0);
  EXPECT_DOUBLE_EQ(six.steps[1].lr, 0.5e-3);
  EXPECT_DOUBLE_EQ(six.steps[2].lr, 1e-3);
  EXPECT_DOUBLE_EQ(six.steps[4].lr, 1e-3);
  EXPECT_DOUBLE_EQ(six.steps[5].lr, 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * 0.5)));
  EXPECT_DOUBLE_EQ(six.steps[2].mtp_loss_weight, 0.3);
  EXPECT_DOUBLE_EQ(six.steps[3].mtp_loss_weight, 0.1);
  EXPECT_EQ(six.bias, two.bias) << "gamma is 0 after two steps' tokens: the bias stays";
  bool moved = false;
  for (const auto& layer : two.bias)
    for (float b : layer) moved |= b != 0.f;
  EXPECT_TRUE(moved) << "gamma 0.05 moved the bias in the first two steps";
}

TEST(Recipe, TheBatchRampGrowsTheBatchAndResumesInTheMiddle) {
  JobSpec spec = Job(6);
  spec.data.global_batch_size = 8;
  spec.data.batch_ramp = {
      .start = 2, .increment = 2, .tokens = 6 * 16};  // 2, 4, 6 over 96 tokens, then 8
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  const std::string dir = "/tmp/moe-recipe-ramp-" + std::to_string(::getpid());
  ASSERT_TRUE(RemoveAll(dir).ok());
  const TrainRun straight = Train(spec);
  ASSERT_EQ(straight.steps.size(), 6u);
  std::vector<int64_t> batches;
  for (const auto& m : straight.steps) batches.push_back(m.tokens / 16);
  // 3 increments over 96 tokens: one per 32. Tokens before each step: 0 (batch 2), 32 (one
  // increment: 4), 96 (the ramp is over: 8), then 8 throughout.
  EXPECT_EQ(batches, (std::vector<int64_t>{2, 4, 8, 8, 8, 8}));
  EXPECT_EQ(straight.steps[2].consumed_samples, 2 + 4 + 8);
  train::TrainerOptions o;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 2;
  o.stop_at_step = 2;
  Train(spec, o);
  o.resume = true;
  o.stop_at_step = 6;
  const TrainRun resumed = Train(spec, o);
  ASSERT_EQ(resumed.steps.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(resumed.steps[i].loss, straight.steps[i + 2].loss) << "step " << i + 3;
  ASSERT_TRUE(RemoveAll(dir).ok());
}

TEST(Recipe, Bf16MomentsTrackFp32Moments) {
  JobSpec spec = Job(20);
  const TrainRun fp32 = Train(spec);
  spec.optimizer.moments_dtype = "bf16";
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.peak_flops = 1e9;
  o.log_steps = false;
  TrainRun bf16;
  o.on_step = [&](const train::StepMetrics& m) { bf16.steps.push_back(m); };
  auto t = train::Trainer::Create(spec, local.ctx, o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (const auto& p : (*t)->model().params().all()) {
    ASSERT_EQ(p->m.dtype(), DType::kBF16) << p->name;
    ASSERT_EQ(p->value.dtype(), DType::kF32) << p->name;
  }
  ASSERT_TRUE((*t)->Run().ok());
  ASSERT_EQ(bf16.steps.size(), fp32.steps.size());
  for (size_t i = 0; i < fp32.steps.size(); ++i) {
    EXPECT_NEAR(bf16.steps[i].loss, fp32.steps[i].loss, 0.01 * fp32.steps[i].loss)
        << "step " << i + 1;
  }
  EXPECT_NE(bf16.steps.back().loss, fp32.steps.back().loss) << "the moments really are bf16";
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Selective recompute computes what it did not keep with the same kernels on the same inputs: the
// losses and gradient norms are bitwise those without it, for every module and all together.
TEST(Recompute, EveryModuleGivesBitwiseTheSameTraining) {
  JobSpec spec = Job(4);
  spec.model.first_k_dense = 1;  // a dense block for `mlp`
  const TrainRun plain = Train(spec);
  for (const std::vector<std::string>& modules :
       std::vector<std::vector<std::string>>{{"core_attn"},
                                             {"mla_up_proj"},
                                             {"mlp"},
                                             {"moe_act"},
                                             {"full"},
                                             {"core_attn", "mla_up_proj", "mlp", "moe_act"}}) {
    spec.training.recompute = modules;
    const TrainRun again = Train(spec);
    ASSERT_EQ(again.steps.size(), plain.steps.size());
    for (size_t i = 0; i < plain.steps.size(); ++i) {
      EXPECT_EQ(again.steps[i].loss, plain.steps[i].loss) << modules.front() << " step " << i + 1;
      EXPECT_EQ(again.steps[i].grad_norm, plain.steps[i].grad_norm)
          << modules.front() << " step " << i + 1;
      EXPECT_EQ(again.steps[i].mtp_loss, plain.steps[i].mtp_loss)
          << modules.front() << " step " << i + 1;
    }
  }
  // MHA recomputes its core too.
  spec.model.attention.type = "mha";
  spec.training.recompute = {};
  const TrainRun mha = Train(spec);
  spec.training.recompute = {"core_attn", "full"};
  const TrainRun mha_again = Train(spec);
  for (size_t i = 0; i < mha.steps.size(); ++i)
    EXPECT_EQ(mha_again.steps[i].loss, mha.steps[i].loss);
}

// training.attention: materialized keeps the [S, S] probabilities instead of each row's
// log-sum-exp; the same model trains to the same losses (summation order differs: within 1e-5
// relative), MLA (d_qk != d_v) and MHA, with and without core_attn recompute.
void ExpectSameTraining(JobSpec spec, const std::string& what) {
  spec.training.attention = "flash";
  const TrainRun flash = Train(spec);
  spec.training.attention = "materialized";
  const TrainRun materialized = Train(spec);
  ASSERT_EQ(materialized.steps.size(), flash.steps.size()) << what;
  ASSERT_FALSE(flash.steps.empty()) << what;
  for (size_t i = 0; i < flash.steps.size(); ++i) {
    const double loss = flash.steps[i].loss, gn = flash.steps[i].grad_norm;
    EXPECT_NEAR(materialized.steps[i].loss, loss, 1e-5 * std::abs(loss))
        << what << " step " << i + 1;
    EXPECT_NEAR(materialized.steps[i].grad_norm, gn, 1e-5 * std::abs(gn))
        << what << " step " << i + 1;
  }
  // Training moved: the comparison covers several different losses, not one repeated value.
  EXPECT_NE(flash.steps.front().loss, flash.steps.back().loss) << what;
}

TEST(AttentionKernel, MaterializedTrainsLikeFlash) {
  JobSpec spec = Job(5);
  ExpectSameTraining(spec, "mla");
  spec.training.recompute = {"core_attn"};
  ExpectSameTraining(spec, "mla, core_attn recompute");
  spec.training.recompute = {};
  spec.model.attention.type = "mha";
  ExpectSameTraining(spec, "mha");
}

TEST(AttentionKernel, MaterializedIsRefusedOnCuda) {
  JobSpec spec = Job(1);
  spec.training.attention = "materialized";
  parallel::LocalParallel local;
  train::TrainerOptions o;
  o.peak_flops = 1e9;
  o.placement = DevicePlacement{Device::Cuda(0), "cuda:0", DType::kBF16, "bf16"};
  auto t = train::Trainer::Create(spec, local.ctx, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("spec.training.attention"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace moe
