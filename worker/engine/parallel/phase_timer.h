// Where a step's time goes, on the timeline its work runs on. The trainer marks the forward +
// backward and the gradient reduction, the token dispatcher each all-to-all (its start, the counts'
// exchange, its wait). On the CPU the host's clock is that timeline: a call returns when its work
// is done. On CUDA the host only queues work and its clock measures the queueing, so the marks are
// events on the kernels' stream (kernels/runtime.h RecordDeviceMark), read after the step's one
// host read: a span is how long the device spent there (for a wait on a collective, how long the
// kernels stood still for it). compute_seconds, alltoall_seconds and grad_sync_seconds, and so the
// controller's straggler detector, then measure the device.
//
// One thread (the training thread) uses a timer.
#pragma once

#include <memory>
#include <utility>
#include <vector>

namespace moe::parallel {

// Marks on one timeline. Record returns an opaque mark; Seconds(a, b) the time from a to b, valid
// once the timeline has passed both (on CUDA: after a host read that waited for the work queued
// before them); Release frees a mark.
class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  virtual void* Record() = 0;
  virtual double Seconds(void* from, void* to) = 0;
  virtual void Release(void* mark) = 0;
  // Returns once the timeline has passed `mark` (the host's clock: at once).
  virtual void Wait(void* mark) { (void)mark; }
};
// The host's steady clock (the CPU device).
std::unique_ptr<PhaseClock> MakeHostPhaseClock();
// Events on the current CUDA device's kernel stream (the host's clock in a build without CUDA).
std::unique_ptr<PhaseClock> MakeDevicePhaseClock();

class PhaseTimer {
 public:
  enum Phase { kForwardBackward, kAllToAll, kGradSync, kNumPhases };
  struct Seconds {
    double forward_backward = 0, alltoall = 0, grad_sync = 0;
    // Forward + backward without the all-to-all's share of it.
    double compute() const { return forward_backward - alltoall; }
  };

  explicit PhaseTimer(std::unique_ptr<PhaseClock> clock) : clock_(std::move(clock)) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // A span of `phase` from Begin to the next End of it (spans of one phase do not nest; a Begin
  // of a phase already begun, which only an error can leave so, starts it again).
  void Begin(Phase phase);
  void End(Phase phase);
  // The sum of each phase's spans since the last Resolve; releases their marks. Call it once the
  // timeline has passed the last End (on CUDA, after the step's host read).
  Seconds Resolve();

 private:
  struct Span {
    Phase phase;
    void* from;
    void* to;
  };
  std::unique_ptr<PhaseClock> clock_;
  void* open_[kNumPhases] = {};
  std::vector<Span> spans_;
};

// Begin on construction, End on destruction; nothing when `timer` is null.
class PhaseSpan {
 public:
  PhaseSpan(PhaseTimer* timer, PhaseTimer::Phase phase) : timer_(timer), phase_(phase) {
    if (timer_ != nullptr) timer_->Begin(phase_);
  }
  ~PhaseSpan() {
    if (timer_ != nullptr) timer_->End(phase_);
  }
  PhaseSpan(const PhaseSpan&) = delete;
  PhaseSpan& operator=(const PhaseSpan&) = delete;

 private:
  PhaseTimer* timer_;
  PhaseTimer::Phase phase_;
};

}  // namespace moe::parallel
