// Whole-model gradient checks in double precision: every parameter's analytic gradient against
// central differences of the loss, for a tiny model, across the awkward MoE cases, MLA (with and
// without q LoRA, d_qk != d_v, YaRN), MTP of depth 1 and 2, and the tiny preset itself.
#include <gtest/gtest.h>

#include "tests/testing/testing.h"
#include "worker/engine/model/head_loss.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"

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

// MLA with every dimension distinct: q LoRA 6, kv latent 4, nope 4 + rope 2 = d_qk 6, d_v 3.
void UseMla(ModelConfig& m) {
  m.attention = AttentionConfig{.type = "mla",
                                .q_lora_rank = 6,
                                .kv_lora_rank = 4,
                                .qk_nope_head_dim = 4,
                                .qk_rope_head_dim = 2,
                                .v_head_dim = 3};
}

// Main loss, MTP depths (lambda / D each, over their positions) and the balance loss, as the
// trainer scales them for one sequence batch.
model::LossScales ScalesFor(const ModelConfig& cfg, int64_t batch, int64_t seq) {
  model::LossScales s;
  s.ce = 1.0 / static_cast<double>(batch * seq);
  s.aux_coeff = cfg.moe.seq_aux_loss_coeff / static_cast<double>(batch);
  for (int64_t k = 1; k <= cfg.mtp_depth; ++k) {
    s.mtp.push_back(cfg.mtp_loss_weight / static_cast<double>(cfg.mtp_depth * batch * (seq - k)));
  }
  return s;
}

struct Case {
  std::string name;
  std::function<void(ModelConfig&)> edit;
  std::vector<float> bias;      // per expert, set on every MoE layer (empty: zeros)
  int forced_empty = -1;        // an expert that must receive no tokens
  int forced_all = -1;          // an expert that must receive every token
  int checks = 120;             // elements checked per parameter (a seeded sample when it has more)
  int64_t loss_chunk_rows = 0;  // the head's loss in chunks of this many rows (0: one chunk)
};

class ModelGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradCheck, EveryParameterMatchesCentralDifferences) {
  const Case& c = GetParam();
  ModelConfig cfg = TinyModel();
  c.edit(cfg);
  ASSERT_TRUE(ValidateModel(cfg, "model").ok()) << ValidateModel(cfg, "model");
  parallel::LocalParallel local;
  const int64_t batch = 2, seq = 5;
  model::ModelOptions mo;
  mo.dtype = DType::kF64;
  mo.max_seq_len = seq;  // YaRN applies when this exceeds the original length
  model::Model model(cfg, local.ctx, 42, mo);
  model::SetLossChunkRows(c.loss_chunk_rows);
  struct Reset {
    ~Reset() { model::SetLossChunkRows(0); }
  } reset;
  if (!c.bias.empty()) {
    for (model::MoeLayer* l : model.moe_layers()) l->SetBias(c.bias);
  }
  Tensor tokens = RandomInts({batch, seq}, 1, static_cast<int32_t>(cfg.vocab_size));
  Tensor targets = RandomInts({batch, seq}, 2, static_cast<int32_t>(cfg.vocab_size));
  const model::LossScales scales = ScalesFor(cfg, batch, seq);
  model.params().ZeroGrads();
  auto mb = model.ForwardBackward(tokens, targets, scales);
  ASSERT_TRUE(mb.ok()) << mb.status();
  EXPECT_EQ(static_cast<int64_t>(mb->mtp_ce_sums.size()), cfg.mtp_depth);
  for (size_t l = 0; l < mb->tokens_per_expert.size(); ++l) {
    const auto& counts = mb->tokens_per_expert[l];
    // The MTP depths' MoE layers see seq - k positions per sequence.
    const int64_t mtp_layer = static_cast<int64_t>(l) - cfg.num_moe_layers() + 1;
    const int64_t positions = batch * (mtp_layer > 0 ? seq - mtp_layer : seq);
    int64_t total = 0;
    for (int64_t n : counts) total += n;
    EXPECT_EQ(total, positions * cfg.moe.top_k) << "dropless: every slot is routed";
    if (c.forced_empty >= 0) {
      EXPECT_EQ(counts[static_cast<size_t>(c.forced_empty)], 0) << "expert should be empty";
    }
    if (c.forced_all >= 0) {
      EXPECT_EQ(counts[static_cast<size_t>(c.forced_all)], positions)
          << "expert should take every token";
    }
  }
  auto loss = [&] {
    auto l = model.Loss(tokens, targets, scales);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? *l : 0.0;
  };
  for (const auto& p : model.params().all()) {
    EXPECT_TRUE(GradientMatches(loss, p->value, p->grad, 2e-5, 1e-8, 1e-6, c.checks))
        << c.name << ": " << p->name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardMoeCases, ModelGradCheck,
    ::testing::Values(
        Case{"grouped_sigmoid", [](ModelConfig&) {}},
        Case{"no_groups",
             [](ModelConfig& m) {
               m.moe.num_groups = 1;
               m.moe.topk_groups = 1;
             }},
        Case{"group_limited_one_group", [](ModelConfig& m) { m.moe.topk_groups = 1; }},
        Case{"softmax_scores_no_bias",
             [](ModelConfig& m) {
               m.moe.score_function = "softmax";
               m.moe.expert_bias = false;
             }},
        Case{"top_k_1", [](ModelConfig& m) { m.moe.top_k = 1; }},
        Case{"top_k_equals_num_experts", [](ModelConfig& m) { m.moe.top_k = 4; }},
        Case{"no_shared_expert_no_aux",
             [](ModelConfig& m) {
               m.moe.num_shared_experts = 0;
               m.moe.seq_aux_loss_coeff = 0;
             }},
        Case{"expert_with_no_tokens",
             [](ModelConfig& m) {
               m.moe.num_groups = 1;
               m.moe.topk_groups = 1;
             },
             {0.f, -50.f, 0.f, 0.f},
             /*forced_empty=*/1},
        Case{"all_tokens_on_one_expert",
             [](ModelConfig& m) {
               m.moe.top_k = 1;
               m.moe.num_groups = 1;
               m.moe.topk_groups = 1;
             },
             {0.f, 0.f, 50.f, 0.f},
             -1,
             /*forced_all=*/2},
        Case{"mla_q_lora", [](ModelConfig& m) { UseMla(m); }},
        Case{"mla_without_q_lora",
             [](ModelConfig& m) {
               UseMla(m);
               m.attention.q_lora_rank = 0;
             }},
        Case{"mla_wide_rope",
             [](ModelConfig& m) {
               UseMla(m);
               m.attention.qk_rope_head_dim = 6;
               m.num_heads = 1;
             }},
        Case{"mla_yarn",
             [](ModelConfig& m) {
               UseMla(m);
               m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                                  .factor = 4,
                                                  .original_max_position_embeddings = 3,
                                                  .beta_fast = 32,
                                                  .beta_slow = 1,
                                                  .mscale = 0.8,
                                                  .mscale_all_dim = 0.8};
             }},
        Case{"mha_yarn",
             [](ModelConfig& m) {
               m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                                  .factor = 8,
                                                  .original_max_position_embeddings = 2,
                                                  .beta_fast = 32,
                                                  .beta_slow = 1,
                                                  .mscale = 1,
                                                  .mscale_all_dim = 1};
             }},
        Case{"mtp_depth_1",
             [](ModelConfig& m) {
               UseMla(m);
               m.mtp_depth = 1;
               m.mtp_loss_weight = 0.7;
             }},
        Case{"mtp_depth_2",
             [](ModelConfig& m) {
               UseMla(m);
               m.mtp_depth = 2;
               m.mtp_loss_weight = 0.5;
             }},
        Case{"mtp_depth_2_loss_in_chunks_of_3_rows",  // 10, 8 and 6 rows: chunks cut sequences
             [](ModelConfig& m) {
               UseMla(m);
               m.mtp_depth = 2;
               m.mtp_loss_weight = 0.5;
             },
             {},
             -1,
             -1,
             120,
             /*loss_chunk_rows=*/3},
        Case{"mtp_depth_1_dense_last_block",
             [](ModelConfig& m) {
               UseMla(m);
               m.first_k_dense = 3;
               m.mtp_depth = 1;
             }},
        Case{"tiny_preset",
             [](ModelConfig& m) {
               m = *ModelPreset("tiny");
               m.init_std = 0.3;  // large enough that every path carries gradient at this size
               m.moe.seq_aux_loss_coeff = 0.1;
             },
             {},
             -1,
             -1,
             /*checks=*/20}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moe
