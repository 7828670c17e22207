// RoPE's frequencies and YaRN's correction (docs/reference/deepseek-v3-architecture.md): what the
// RoPE kernels rotate by, and the factor YaRN puts on the attention's softmax scale.
#pragma once

#include <cstdint>
#include <vector>

#include "common/job_spec.h"

namespace moe::model {

struct RopeFrequencies {
  std::vector<double>
      inv_freq;  // [rope_dim / 2]: theta^(-2j / rope_dim), YaRN-corrected when it applies
  double scale_factor = 1;  // multiplies the softmax scale: mscale^2 with YaRN, else 1
  bool yarn = false;        // whether YaRN applied
};

// YaRN applies only when `max_seq_len` (the run's sequence length) exceeds
// original_max_position_embeddings.
RopeFrequencies ComputeRopeFrequencies(double theta, int64_t rope_dim,
                                       const RopeScalingConfig& scaling, int64_t max_seq_len);

}  // namespace moe::model
