// AdamW over a ParamSet, the learning-rate schedule, and global gradient-norm clipping.
#pragma once

#include <cstdint>

#include "common/job_spec.h"
#include "worker/engine/param.h"

namespace moe {

// Linear warmup to lr over warmup_steps (step 1 gets lr / warmup_steps), then cosine decay to min_lr
// at decay_steps; min_lr after. Steps are 1-based.
double LearningRate(const OptimizerConfig& o, int64_t decay_steps, int64_t step);

class AdamWOptimizer {
 public:
  explicit AdamWOptimizer(const OptimizerConfig& cfg) : cfg_(cfg) {}
  // Scales gradients by min(1, grad_clip / grad_norm) and applies one AdamW update at `step` (1-based)
  // with learning rate `lr`. Returns the clip factor applied.
  double Step(const ParamSet& params, int64_t step, double lr, double grad_norm);

 private:
  OptimizerConfig cfg_;
};

}  // namespace moe
