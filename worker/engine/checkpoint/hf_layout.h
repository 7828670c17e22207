// The Hugging Face DeepseekV3 layout (docs/reference/deepseek-v3-architecture.md, "The released
// checkpoint layout") against the engine's tensors: which of our tensors, at which flat offset,
// holds each released weight. One table serves both directions: moe-export writes HF tensors from
// checkpoint ranges, moe-train --init-from reads them into the engine's parameters.
//
// Every HF tensor is a contiguous range of one engine tensor: our fused SwiGLU weight w13 [2F, h]
// holds gate_proj in its first F rows and up_proj in the next; an expert tensor [E, 2F, h] holds
// expert J at J * 2F * h. MTP depth k is HF layer num_layers + k - 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe::checkpoint {

struct HfTensor {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::string engine_name;  // "param/<name>/value" or "bias/<moe layer>" (checkpoint names)
  std::vector<int64_t> engine_shape;  // the engine tensor's global shape
  int64_t offset = 0;                 // first element within the engine tensor (flattened)
  bool table_copy = false;  // an MTP layer's copy of the shared embedding or head (export only)
};

// The released layout of `m` (DeepseekV3 has MLA: an MHA model has none; INVALID_ARGUMENT). With
// `mtp_table_copies`, each MTP layer also lists its copies of the embedding and head, as released
// checkpoints carry them.
StatusOr<std::vector<HfTensor>> HfLayout(const ModelConfig& m, bool mtp_table_copies);

// What config.json says beside the model's shape.
struct HfConfigInfo {
  int64_t max_position_embeddings = 4096;
  // The sequence length the run computed its rotary frequencies for (ModelOptions::max_seq_len):
  // YaRN applied when it exceeds rope_scaling.original_max_position_embeddings, and only then is
  // rope_scaling written (transformers and DeepSeek's inference code apply YaRN whenever it is
  // present). 0: max_position_embeddings.
  int64_t rope_length = 0;
  std::string torch_dtype = "bfloat16";          // the weights' dtype: bfloat16, float32 or float64
  int64_t bos_token_id = -1, eos_token_id = -1;  // the tokenizer's (< 0: not written)

  bool yarn_applied(const ModelConfig& m) const;
};

// config.json of `m` (model_type deepseek_v3, the reference file's keys, every routing and rotary
// convention the weights assume written out).
Node HfConfig(const ModelConfig& m, const HfConfigInfo& info);

// The conventions of a config.json that this engine cannot run, refused by name
// (INVALID_ARGUMENT naming the key, its value and what is supported): another model_type or
// activation, tied embeddings, attention biases, moe_layer_freq != 1, rope_interleave false,
// norm_topk_prob other than the scoring function implies, a topk_method other than noaux_tc /
// greedy / group_limited_greedy (or one that disagrees with n_group), rope_scaling other than YaRN
// or with mscale != mscale_all_dim, quantized weights.
Status CheckHfConventions(const Node& config);

// Checks that an HF config.json describes the same model as `m` (INVALID_ARGUMENT naming the first
// key that differs, with both values).
Status CheckHfConfig(const Node& config, const ModelConfig& m);

}  // namespace moe::checkpoint
