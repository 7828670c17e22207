#include "worker/engine/optimizer.h"

#include <cmath>

#include "kernels/optimizer.h"

namespace moe {

double LearningRate(const OptimizerConfig& o, int64_t decay_steps, int64_t step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  }
  if (step >= decay_steps || decay_steps <= o.warmup_steps) return step >= decay_steps ? o.min_lr : o.lr;
  const double progress = static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double AdamWOptimizer::Step(const ParamSet& params, int64_t step, double lr, double grad_norm) {
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) clip = cfg_.grad_clip / (grad_norm + 1e-6);
  kernels::AdamWConfig a;
  a.lr = lr;
  a.beta1 = cfg_.beta1;
  a.beta2 = cfg_.beta2;
  a.eps = cfg_.eps;
  a.step = step;
  a.grad_scale = clip;
  for (const auto& p : params.all()) {
    a.weight_decay = p->weight_decay ? cfg_.weight_decay : 0.0;
    kernels::AdamW(p->value, p->grad, p->m, p->v, a);
  }
  return clip;
}

}  // namespace moe
