#include "worker/engine/parallel/step_profile.h"

#include <algorithm>
#include <atomic>

namespace moe::parallel {
namespace {
constexpr const char* kOther = "other";
std::atomic<StepProfile*> g_profile{nullptr};
}  // namespace

void InstallStepProfile(StepProfile* profile) { g_profile.store(profile); }
StepProfile* InstalledStepProfile() { return g_profile.load(std::memory_order_relaxed); }

StepProfile::~StepProfile() {
  for (const Stretch& s : stretches_) clock_->Release(s.from);
}

void StepProfile::Mark(const char* phase) { stretches_.push_back({phase, clock_->Record()}); }

void StepProfile::Begin() {
  for (const Stretch& s : stretches_) clock_->Release(s.from);
  stretches_.clear();
  started_ = true;
  Mark(open_.empty() ? kOther : open_.back());
}

void StepProfile::Enter(const char* phase) {
  open_.push_back(phase);
  if (started_) Mark(phase);
}

void StepProfile::Leave() {
  if (open_.empty()) return;  // a scope opened before the profile was installed
  open_.pop_back();
  if (started_) Mark(open_.empty() ? kOther : open_.back());
}

std::vector<std::pair<std::string, double>> StepProfile::End() {
  std::vector<std::pair<std::string, double>> out;
  if (!started_) return out;
  Mark(kOther);  // the end of the last stretch
  // Work queued after the step's read (the bias update, the last scope's end) may still run: wait
  // for the end mark, after which the device has passed every mark before it.
  clock_->Wait(stretches_.back().from);
  for (size_t i = 0; i + 1 < stretches_.size(); ++i) {
    const double t = clock_->Seconds(stretches_[i].from, stretches_[i + 1].from);
    const std::string name = stretches_[i].phase;
    auto it = out.begin();
    while (it != out.end() && it->first != name) ++it;
    if (it == out.end()) {
      out.emplace_back(name, t);
    } else {
      it->second += t;
    }
  }
  // "other" first, whether or not the step began in it.
  auto other =
      std::find_if(out.begin(), out.end(), [](const auto& r) { return r.first == kOther; });
  if (other == out.end()) {
    out.insert(out.begin(), {kOther, 0.0});
  } else {
    std::rotate(out.begin(), other, other + 1);
  }
  for (const Stretch& s : stretches_) clock_->Release(s.from);
  stretches_.clear();
  started_ = false;
  return out;
}

}  // namespace moe::parallel
