// The built-in model presets.
#include "common/presets.h"

namespace moe {
namespace {

// Trains in the demo's minutes on two cores, with every DeepSeek-V3 feature on: MLA (q LoRA, the
// shared rotary key, d_qk != d_v), one MTP depth, groups, a shared expert, the bias, the balance
// loss.
ModelConfig Tiny() {
  ModelConfig m;
  m.vocab_size = 2048;
  m.hidden_size = 128;
  m.num_layers = 4;
  m.num_heads = 4;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 384;
  m.mtp_depth = 1;
  m.mtp_loss_weight = 0.3;
  m.attention = AttentionConfig{.type = "mla",
                                .q_lora_rank = 64,
                                .kv_lora_rank = 32,
                                .qk_nope_head_dim = 32,
                                .qk_rope_head_dim = 16,
                                .v_head_dim = 32};
  m.moe = MoeConfig{.num_experts = 8,
                    .top_k = 2,
                    .num_shared_experts = 1,
                    .ffn_hidden = 128,
                    .num_groups = 4,
                    .topk_groups = 2,
                    .score_function = "sigmoid",
                    .route_scale = 1.0,
                    .expert_bias = true,
                    .bias_update_rate = 1e-3,
                    .bias_update_schedule = {},
                    .seq_aux_loss_coeff = 1e-4};
  return m;
}

// For benchmarks: large enough that the GEMMs dominate, small enough for a CPU step in seconds.
ModelConfig Small() {
  ModelConfig m;
  m.vocab_size = 8192;
  m.hidden_size = 1024;
  m.num_layers = 4;
  m.num_heads = 16;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 2816;
  m.moe = MoeConfig{.num_experts = 16,
                    .top_k = 4,
                    .num_shared_experts = 1,
                    .ffn_hidden = 512,
                    .num_groups = 4,
                    .topk_groups = 2,
                    .score_function = "sigmoid",
                    .route_scale = 2.5,
                    .expert_bias = true,
                    .bias_update_rate = 1e-3,
                    .bias_update_schedule = {},
                    .seq_aux_loss_coeff = 1e-4};
  return m;
}

// deepseek-ai/DeepSeek-V3 (inference/configs/config_671B.json) with the paper's recipe for what the
// model carries: init std 0.006 (output projections 0.006 / sqrt(2 * 61), Megatron's rule, as for
// every model: ModelConfig::init_std), gamma 0.001 for the first 14.3T tokens then 0, lambda 0.3
// for the first 10T tokens then 0.1 (docs/reference/deepseek-v3-architecture.md). YaRN is
// configured as released; it applies only to runs longer than 4096.
ModelConfig DeepSeekV3() {
  ModelConfig m;
  m.vocab_size = 129280;
  m.hidden_size = 7168;
  m.num_layers = 61;
  m.num_heads = 128;
  m.first_k_dense = 3;
  m.dense_ffn_hidden = 18432;
  m.mtp_depth = 1;
  m.mtp_loss_weight = 0.3;
  m.mtp_loss_weight_schedule = {{.until_tokens = 10e12, .value = 0.3}, {.value = 0.1}};
  m.init_std = 0.006;
  m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                     .factor = 40,
                                     .original_max_position_embeddings = 4096,
                                     .beta_fast = 32,
                                     .beta_slow = 1,
                                     .mscale = 1,
                                     .mscale_all_dim = 1};
  m.attention = AttentionConfig{.type = "mla",
                                .q_lora_rank = 1536,
                                .kv_lora_rank = 512,
                                .qk_nope_head_dim = 128,
                                .qk_rope_head_dim = 64,
                                .v_head_dim = 128};
  m.moe =
      MoeConfig{.num_experts = 256,
                .top_k = 8,
                .num_shared_experts = 1,
                .ffn_hidden = 2048,
                .num_groups = 8,
                .topk_groups = 4,
                .score_function = "sigmoid",
                .route_scale = 2.5,
                .expert_bias = true,
                .bias_update_rate = 1e-3,
                .bias_update_schedule = {{.until_tokens = 14.3e12, .value = 1e-3}, {.value = 0}},
                .seq_aux_loss_coeff = 1e-4};
  return m;
}

// deepseek-ai/DeepSeek-V2-Lite (15.7B, 2.4B activated): MLA without q LoRA, 64 routed experts top-6
// and 2 shared, softmax routing without groups or bias, the auxiliary loss (alpha 0.001).
ModelConfig DeepSeekV2Lite() {
  ModelConfig m;
  m.vocab_size = 102400;
  m.hidden_size = 2048;
  m.num_layers = 27;
  m.num_heads = 16;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 10944;
  m.init_std = 0.006;
  m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                     .factor = 40,
                                     .original_max_position_embeddings = 4096,
                                     .beta_fast = 32,
                                     .beta_slow = 1,
                                     .mscale = 0.707,
                                     .mscale_all_dim = 0.707};
  m.attention = AttentionConfig{.type = "mla",
                                .q_lora_rank = 0,
                                .kv_lora_rank = 512,
                                .qk_nope_head_dim = 128,
                                .qk_rope_head_dim = 64,
                                .v_head_dim = 128};
  m.moe = MoeConfig{.num_experts = 64,
                    .top_k = 6,
                    .num_shared_experts = 2,
                    .ffn_hidden = 1408,
                    .num_groups = 1,
                    .topk_groups = 1,
                    .score_function = "softmax",
                    .route_scale = 1.0,
                    .expert_bias = false,
                    .bias_update_rate = 0,
                    .bias_update_schedule = {},
                    .seq_aux_loss_coeff = 1e-3};
  return m;
}

struct PresetEntry {
  const char* name;
  ModelConfig (*make)();
};

constexpr PresetEntry kPresets[] = {{"tiny", Tiny},
                                    {"small", Small},
                                    {"deepseek-v3-671b", DeepSeekV3},
                                    {"deepseek-v2-lite", DeepSeekV2Lite}};

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.push_back(p.name);
  return out;
}

StatusOr<ModelConfig> ModelPreset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig m = p.make();
    m.preset = name;
    return m;
  }
  std::string known;
  for (const auto& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown preset '" + name + "' (known: " + known + ")");
}

}  // namespace moe
