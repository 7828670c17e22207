// Model FLOPs per training step by Megatron-LM's formula (megatron/training/training.py,
// num_floating_point_operations; see docs/reference/flops-and-models.md), so that our TFLOP/s per
// device means what Megatron's "throughput per GPU" and the 1,648 TFLOP/s record mean.
#pragma once

#include <cstdint>

#include "common/job_spec.h"

namespace moe {

// Megatron pads the vocabulary to a multiple of 128 (make-vocab-size-divisible-by).
int64_t PaddedVocab(int64_t vocab_size, int64_t multiple = 128);

struct FlopsBreakdown {
  double dense_ffn = 0;  // dense SwiGLU layers
  double routed = 0;     // routed experts (top-k only)
  double shared = 0;     // shared experts
  double attn_proj = 0;  // attention projections (MHA q,k,v,o or the MLA terms)
  double attn_core = 0;  // causal core attention (QK^T and AV)
  double mtp = 0;        // MTP norms and eh_proj
  double logits = 0;     // output head
  double total() const {
    return dense_ffn + routed + shared + attn_proj + attn_core + mtp + logits;
  }
};

// FLOPs of one training iteration (forward + backward) over `batch` sequences of `seq_length`.
FlopsBreakdown MegatronFlops(const ModelConfig& m, int64_t batch, int64_t seq_length);
inline double MegatronFlopsPerStep(const ModelConfig& m, int64_t batch, int64_t seq_length) {
  return MegatronFlops(m, batch, seq_length).total();
}

// TFLOP/s per device = FLOPs / (seconds per iteration * 1e12 * world_size).
inline double TflopsPerDevice(double flops_per_step, double step_seconds, int64_t world_size) {
  if (step_seconds <= 0 || world_size <= 0) return 0;
  return flops_per_step / (step_seconds * 1e12 * static_cast<double>(world_size));
}

}  // namespace moe
