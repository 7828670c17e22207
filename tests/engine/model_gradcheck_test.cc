// Whole-model gradient checks in double precision: every parameter's analytic gradient against
// central differences of the loss, for a tiny model, across the awkward MoE cases.
#include <gtest/gtest.h>

#include "tests/testing/testing.h"
#include "worker/engine/model.h"

namespace moe {
namespace {

using moe::testing::GradientMatches;
using moe::testing::RandomInts;

ModelConfig TinyModel() {
  ModelConfig m;
  m.vocab_size = 11;
  m.hidden_size = 8;
  m.num_layers = 3;
  m.num_heads = 2;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 10;
  m.init_std = 0.3;  // large enough that every path carries gradient
  m.moe.num_experts = 4;
  m.moe.top_k = 2;
  m.moe.num_shared_experts = 1;
  m.moe.ffn_hidden = 6;
  m.moe.num_groups = 2;
  m.moe.topk_groups = 2;
  m.moe.route_scale = 1.7;
  m.moe.bias_update_rate = 0.01;
  m.moe.seq_aux_loss_coeff = 0.1;  // large, so that the balance loss's gradient shows
  return m;
}

struct Case {
  std::string name;
  std::function<void(ModelConfig&)> edit;
  std::vector<float> bias;  // per expert, set on every MoE layer (empty: zeros)
  int forced_empty = -1;    // an expert that must receive no tokens
  int forced_all = -1;      // an expert that must receive every token
};

class ModelGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradCheck, EveryParameterMatchesCentralDifferences) {
  const Case& c = GetParam();
  ModelConfig cfg = TinyModel();
  c.edit(cfg);
  ASSERT_TRUE(ValidateModel(cfg, "model").ok()) << ValidateModel(cfg, "model");
  LocalParallel local;
  Model model(cfg, local.ctx, 42, DType::kF64, Device::Cpu());
  if (!c.bias.empty()) {
    for (MoeLayer* l : model.moe_layers()) l->SetBias(c.bias);
  }
  const int64_t batch = 2, seq = 5;
  Tensor tokens = RandomInts({batch, seq}, 1, static_cast<int32_t>(cfg.vocab_size));
  Tensor targets = RandomInts({batch, seq}, 2, static_cast<int32_t>(cfg.vocab_size));
  const double ce_scale = 1.0 / (batch * seq), aux = cfg.moe.seq_aux_loss_coeff / batch;
  model.params().ZeroGrads();
  auto mb = model.ForwardBackward(tokens, targets, ce_scale, aux);
  ASSERT_TRUE(mb.ok()) << mb.status();
  for (const auto& counts : mb->tokens_per_expert) {
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    EXPECT_EQ(total, batch * seq * cfg.moe.top_k) << "dropless: every slot is routed";
    if (c.forced_empty >= 0) {
      EXPECT_EQ(counts[static_cast<size_t>(c.forced_empty)], 0) << "expert should be empty";
    }
    if (c.forced_all >= 0) {
      EXPECT_EQ(counts[static_cast<size_t>(c.forced_all)], batch * seq) << "expert should take every token";
    }
  }
  auto loss = [&] {
    auto l = model.Loss(tokens, targets, ce_scale, aux);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? *l : 0.0;
  };
  for (const auto& p : model.params().all()) {
    EXPECT_TRUE(GradientMatches(loss, p->value, p->grad, 2e-5, 1e-8, 1e-6, 120)) << c.name << ": " << p->name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardMoeCases, ModelGradCheck,
    ::testing::Values(
        Case{"grouped_sigmoid", [](ModelConfig&) {}},
        Case{"no_groups", [](ModelConfig& m) { m.moe.num_groups = 1; m.moe.topk_groups = 1; }},
        Case{"group_limited_one_group", [](ModelConfig& m) { m.moe.topk_groups = 1; }},
        Case{"softmax_scores_no_bias", [](ModelConfig& m) { m.moe.score_function = "softmax"; m.moe.bias_update_rate = 0; }},
        Case{"top_k_1", [](ModelConfig& m) { m.moe.top_k = 1; }},
        Case{"top_k_equals_num_experts", [](ModelConfig& m) { m.moe.top_k = 4; }},
        Case{"no_shared_expert_no_aux", [](ModelConfig& m) { m.moe.num_shared_experts = 0; m.moe.seq_aux_loss_coeff = 0; }},
        Case{"expert_with_no_tokens", [](ModelConfig& m) { m.moe.num_groups = 1; m.moe.topk_groups = 1; },
             {0.f, -50.f, 0.f, 0.f}, /*forced_empty=*/1},
        Case{"all_tokens_on_one_expert", [](ModelConfig& m) { m.moe.top_k = 1; m.moe.num_groups = 1; m.moe.topk_groups = 1; },
             {0.f, 0.f, 50.f, 0.f}, -1, /*forced_all=*/2}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moe
