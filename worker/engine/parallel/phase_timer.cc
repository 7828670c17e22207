#include "worker/engine/parallel/phase_timer.h"

#include <chrono>

#include "common/check.h"
#include "kernels/runtime.h"

namespace moe::parallel {
namespace {

class HostPhaseClock final : public PhaseClock {
 public:
  using Clock = std::chrono::steady_clock;
  void* Record() override { return new Clock::time_point(Clock::now()); }
  double Seconds(void* from, void* to) override {
    return std::chrono::duration<double>(*static_cast<Clock::time_point*>(to) -
                                         *static_cast<Clock::time_point*>(from))
        .count();
  }
  void Release(void* mark) override { delete static_cast<Clock::time_point*>(mark); }
};

class DevicePhaseClock final : public PhaseClock {
 public:
  void* Record() override { return kernels::RecordDeviceMark(); }
  double Seconds(void* from, void* to) override { return kernels::DeviceMarkSeconds(from, to); }
  void Release(void* mark) override { kernels::ReleaseDeviceMark(mark); }
  void Wait(void* mark) override { kernels::WaitDeviceMark(mark); }
};

}  // namespace

std::unique_ptr<PhaseClock> MakeHostPhaseClock() { return std::make_unique<HostPhaseClock>(); }
std::unique_ptr<PhaseClock> MakeDevicePhaseClock() {
  if (!kernels::HaveCuda()) return MakeHostPhaseClock();
  return std::make_unique<DevicePhaseClock>();
}

PhaseTimer::~PhaseTimer() {
  for (const Span& s : spans_) {
    clock_->Release(s.from);
    clock_->Release(s.to);
  }
  for (void* m : open_)
    if (m != nullptr) clock_->Release(m);
}

void PhaseTimer::Begin(Phase phase) {
  if (open_[phase] != nullptr) clock_->Release(open_[phase]);  // a span an error left open
  open_[phase] = clock_->Record();
}

void PhaseTimer::End(Phase phase) {
  MOE_CHECK(open_[phase] != nullptr) << "PhaseTimer: phase " << phase << " ended, never begun";
  spans_.push_back({phase, open_[phase], clock_->Record()});
  open_[phase] = nullptr;
}

PhaseTimer::Seconds PhaseTimer::Resolve() {
  Seconds out;
  for (const Span& s : spans_) {
    const double t = clock_->Seconds(s.from, s.to);
    switch (s.phase) {
      case kForwardBackward:
        out.forward_backward += t;
        break;
      case kAllToAll:
        out.alltoall += t;
        break;
      case kGradSync:
        out.grad_sync += t;
        break;
      case kNumPhases:
        break;
    }
    clock_->Release(s.from);
    clock_->Release(s.to);
  }
  spans_.clear();
  return out;
}

}  // namespace moe::parallel
