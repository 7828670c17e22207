// The step's phase times (parallel/phase_timer.h) on a fake device stream: the host queues kernels
// and waits for collectives, a mark is the time at which the stream reaches it (what a CUDA event
// records), and the host's own clock plays no part, so the spans measure the device: an all-to-all
// started and overlapped by compute costs nothing, its wait costs the time the stream stood still,
// compute is the forward + backward without that. The host clock (the CPU device) is checked
// against a sleep.
#include "worker/engine/parallel/phase_timer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace moe::parallel {
namespace {

// One stream of a simulated device, in seconds.
class FakeStream final : public PhaseClock {
 public:
  explicit FakeStream(int* live) : live_(live) {}
  void Kernel(double seconds) { now_ += seconds; }
  // cudaStreamWaitEvent on a collective that ends at `t` (on another stream).
  void WaitUntil(double t) { now_ = std::max(now_, t); }
  void* Record() override {
    marks_.push_back(std::make_unique<double>(now_));
    ++*live_;
    return marks_.back().get();
  }
  double Seconds(void* from, void* to) override {
    return *static_cast<double*>(to) - *static_cast<double*>(from);
  }
  void Release(void*) override { --*live_; }

 private:
  double now_ = 0;
  int* live_;  // marks recorded and not released (outlives the stream, to check the destructor)
  std::vector<std::unique_ptr<double>> marks_;
};

TEST(PhaseTimer, DeviceMarksMeasureTheStreamNotTheHost) {
  int live = 0;
  auto owned = std::make_unique<FakeStream>(&live);
  FakeStream* dev = owned.get();
  PhaseTimer timer(std::move(owned));
  timer.Begin(PhaseTimer::kForwardBackward);
  dev->Kernel(0.003);  // attention, routing
  {
    PhaseSpan start(&timer,
                    PhaseTimer::kAllToAll);                      // queued: the stream does not wait
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the host is slow to queue it
  }
  dev->Kernel(0.002);  // the shared expert, beside the all-to-all (which ends at t = 9 ms)
  {
    PhaseSpan wait(&timer, PhaseTimer::kAllToAll);
    dev->WaitUntil(0.009);  // 4 ms standing still
  }
  dev->Kernel(0.001);
  timer.End(PhaseTimer::kForwardBackward);
  timer.Begin(PhaseTimer::kGradSync);
  dev->WaitUntil(0.015);  // the last gradient bucket's reduce-scatter
  timer.End(PhaseTimer::kGradSync);
  const PhaseTimer::Seconds s = timer.Resolve();
  EXPECT_DOUBLE_EQ(s.forward_backward, 0.010);
  EXPECT_DOUBLE_EQ(s.alltoall, 0.004);
  EXPECT_DOUBLE_EQ(s.compute(), 0.006);
  EXPECT_DOUBLE_EQ(s.grad_sync, 0.005);
  EXPECT_EQ(live, 0) << "Resolve releases every mark";
  // The next step starts from nothing.
  const PhaseTimer::Seconds next = timer.Resolve();
  EXPECT_EQ(next.forward_backward + next.alltoall + next.grad_sync, 0.0);
}

TEST(PhaseTimer, SpansOfAPhaseAddUpAndAnOpenSpanIsReleased) {
  int live = 0;
  auto owned = std::make_unique<FakeStream>(&live);
  FakeStream* dev = owned.get();
  {
    PhaseTimer timer(std::move(owned));
    for (int i = 0; i < 3; ++i) {
      PhaseSpan wait(&timer, PhaseTimer::kAllToAll);
      dev->Kernel(0.5);
    }
    EXPECT_DOUBLE_EQ(timer.Resolve().alltoall, 1.5);
    timer.Begin(PhaseTimer::kForwardBackward);
    timer.Begin(PhaseTimer::kForwardBackward);  // an error left it open: it starts again
    timer.End(PhaseTimer::kForwardBackward);
    timer.Begin(PhaseTimer::kGradSync);  // left open at the end
    EXPECT_EQ(live, 3);                  // the restarted span's two marks and the open one
  }
  EXPECT_EQ(live, 0) << "the destructor releases the spans not resolved and the open one";
}

TEST(PhaseTimer, HostClockMeasuresWhatTheHostWaited) {
  PhaseTimer timer(MakeHostPhaseClock());
  {
    PhaseSpan wait(&timer, PhaseTimer::kGradSync);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  const double s = timer.Resolve().grad_sync;
  EXPECT_GE(s, 0.030);
  EXPECT_LT(s, 5.0);
}

TEST(PhaseTimer, NullTimerSpansDoNothing) { PhaseSpan nothing(nullptr, PhaseTimer::kAllToAll); }

}  // namespace
}  // namespace moe::parallel
