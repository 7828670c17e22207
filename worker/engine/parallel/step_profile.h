// Where a training step's time goes, phase by phase, for the benchmarks (bench/slice_bench.cc,
// tests/gpu/perf.sh): the engine says which phase its work is in (a ProfilePhase scope around
// attention, the MLA projections, the router, the experts, ...), and an installed StepProfile
// marks every switch on the timeline the work runs on (PhaseClock: events on the kernels' stream
// on CUDA, the host's clock on the CPU). The stretches between two marks partition the step: each
// belongs to the innermost phase open when it began, so the phases add up to the step's time from
// Begin to End, with what no scope claims under "other".
//
// Without an installed profile a scope costs one pointer test. One thread (the training thread)
// marks; the profile is process-wide because the phases are deep in the model's layers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/parallel/phase_timer.h"

namespace moe::parallel {

class StepProfile {
 public:
  explicit StepProfile(std::unique_ptr<PhaseClock> clock) : clock_(std::move(clock)) {}
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // A step starts: marks the timeline, in the innermost open scope's phase ("other" outside any).
  void Begin();
  // From here on the work is in `phase` (a string literal: kept by pointer). Before Begin: ignored.
  void Enter(const char* phase);
  // The phase `phase` ended: the enclosing one (or "other") resumes.
  void Leave();
  // Ends the step: seconds by phase, "other" first and then in the order each was first entered,
  // summing to the step's time. Marks the end, waits until the timeline has passed it (on CUDA the
  // host waits for the device: call it after the step, not inside it) and releases the marks.
  std::vector<std::pair<std::string, double>> End();

 private:
  struct Stretch {
    const char* phase;
    void* from;
  };
  void Mark(const char* phase);

  std::unique_ptr<PhaseClock> clock_;
  bool started_ = false;
  std::vector<const char*> open_;  // the scopes entered and not left, innermost last
  std::vector<Stretch> stretches_;
};

// The process's installed profile (null: none, the default). The benchmark installs one before it
// trains and removes it after, outside any scope (a scope keeps the profile it began with).
void InstallStepProfile(StepProfile* profile);
StepProfile* InstalledStepProfile();

// Enters `phase` on construction, leaves it on destruction; nothing without an installed profile.
class ProfilePhase {
 public:
  explicit ProfilePhase(const char* phase) : profile_(InstalledStepProfile()) {
    if (profile_ != nullptr) profile_->Enter(phase);
  }
  ~ProfilePhase() {
    if (profile_ != nullptr) profile_->Leave();
  }
  // The scope's work goes on in `phase` (a sequence of phases in one block of code).
  void Switch(const char* phase) {
    if (profile_ == nullptr) return;
    profile_->Leave();
    profile_->Enter(phase);
  }
  ProfilePhase(const ProfilePhase&) = delete;
  ProfilePhase& operator=(const ProfilePhase&) = delete;

 private:
  StepProfile* profile_;
};

}  // namespace moe::parallel
