#include "worker/engine/model/rope_freqs.h"

#include <algorithm>
#include <cmath>

namespace moe::model {
namespace {

// The rotary dimension at which a wavelength completes `rotations` turns over the original length.
double DimsFor(double rotations, double rope_dim, double original_len, double theta) {
  return rope_dim * std::log(original_len / (2 * M_PI * rotations)) / (2 * std::log(theta));
}

}  // namespace

RopeFrequencies ComputeRopeFrequencies(double theta, int64_t rope_dim, const RopeScalingConfig& s,
                                       int64_t max_seq_len) {
  RopeFrequencies f;
  const int64_t half = rope_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    f.inv_freq.push_back(
        std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(rope_dim)));
  }
  if (s.type != "yarn" || max_seq_len <= s.original_max_position_embeddings) return f;
  f.yarn = true;
  const double d = static_cast<double>(rope_dim),
               orig = static_cast<double>(s.original_max_position_embeddings);
  const double low = std::max(std::floor(DimsFor(s.beta_fast, d, orig, theta)), 0.0);
  double high = std::min(std::ceil(DimsFor(s.beta_slow, d, orig, theta)), d - 1);
  if (high == low) high += 0.001;
  for (int64_t j = 0; j < half; ++j) {
    const double ramp = std::clamp((static_cast<double>(j) - low) / (high - low), 0.0, 1.0);
    const double smooth = 1 - ramp;
    f.inv_freq[static_cast<size_t>(j)] *= smooth + (1 - smooth) / s.factor;
  }
  const double mscale = s.factor <= 1 ? 1.0 : 0.1 * s.mscale_all_dim * std::log(s.factor) + 1.0;
  f.scale_factor = mscale * mscale;
  return f;
}

}  // namespace moe::model
