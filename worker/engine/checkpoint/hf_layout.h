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

namespace moe {

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

// config.json of `m` (model_type deepseek_v3, the reference file's keys).
Node HfConfig(const ModelConfig& m, int64_t max_position_embeddings);

// Checks that an HF config.json describes the same model as `m` (INVALID_ARGUMENT naming the first
// key that differs, with both values).
Status CheckHfConfig(const Node& config, const ModelConfig& m);

}  // namespace moe
