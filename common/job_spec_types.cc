#include "common/job_spec_types.h"

#include <algorithm>
#include <cmath>

namespace moe {

double ScheduleValue(const Schedule& s, double tokens, double fallback) {
  if (s.empty()) return fallback;
  double start = 0;
  for (const ScheduleSegment& g : s) {
    const bool last = &g == &s.back();
    if (g.until_tokens && tokens >= *g.until_tokens && !last) {
      start = *g.until_tokens;
      continue;
    }
    if (g.shape == "constant") return g.value;
    const double span = g.until_tokens ? *g.until_tokens - start : 0;
    const double frac = span > 0 ? std::clamp((tokens - start) / span, 0.0, 1.0) : 1.0;
    if (g.shape == "linear") return g.from + (g.to - g.from) * frac;
    return g.to + (g.from - g.to) * 0.5 * (1.0 + std::cos(M_PI * frac));  // cosine
  }
  return fallback;
}

double MoeConfig::BiasUpdateRate(double tokens) const {
  return ScheduleValue(bias_update_schedule, tokens, bias_update_rate);
}

double ModelConfig::MtpLossWeight(double tokens) const {
  return ScheduleValue(mtp_loss_weight_schedule, tokens, mtp_loss_weight);
}

bool ModelConfig::MtpTrains() const {
  if (mtp_depth <= 0) return false;
  if (mtp_loss_weight_schedule.empty()) return mtp_loss_weight > 0;
  for (const auto& g : mtp_loss_weight_schedule) {
    if (g.value > 0 || g.from > 0 || g.to > 0) return true;
  }
  return false;
}

int64_t JobSpec::GlobalBatchAt(double tokens) const {
  const BatchRampConfig& r = data.batch_ramp;
  if (r.start == 0 || tokens >= r.tokens) return data.global_batch_size;
  const int64_t increments = (data.global_batch_size - r.start) / r.increment;
  const double per_increment = r.tokens / static_cast<double>(increments);
  const int64_t done = static_cast<int64_t>(tokens / per_increment);
  return std::min(data.global_batch_size, r.start + done * r.increment);
}

double JobSpec::TokensAfter(int64_t steps) const {
  const double seq = static_cast<double>(data.seq_length);
  double tokens = 0;
  int64_t s = 0;
  // Through the ramp step by step (tens of thousands of steps at most in a real recipe), then the
  // full batch.
  for (; s < steps && data.batch_ramp.start != 0 && tokens < data.batch_ramp.tokens; ++s)
    tokens += static_cast<double>(GlobalBatchAt(tokens)) * seq;
  return tokens +
         static_cast<double>(steps - s) * static_cast<double>(data.global_batch_size) * seq;
}

}  // namespace moe
