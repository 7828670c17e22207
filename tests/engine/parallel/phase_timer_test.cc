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
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/engine/parallel/step_profile.h"

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
  void Wait(void* mark) override { waited_ = mark; }
  void* last() const { return marks_.empty() ? nullptr : marks_.back().get(); }
  void* waited() const { return waited_; }

 private:
  void* waited_ = nullptr;
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

// A step's profile (parallel/step_profile.h): every stretch of the stream belongs to the innermost
// phase open when it began, so the phases add up to the step, nested scopes included.
std::map<std::string, double> AsMap(const std::vector<std::pair<std::string, double>>& v) {
  return {v.begin(), v.end()};
}

TEST(StepProfile, PhasesPartitionTheStepOnTheDeviceTimeline) {
  int live = 0;
  auto owned = std::make_unique<FakeStream>(&live);
  FakeStream* dev = owned.get();
  {
    StepProfile profile(std::move(owned));
    InstallStepProfile(&profile);
    profile.Begin();
    dev->Kernel(0.001);  // embedding: no scope claims it
    {
      ProfilePhase attn("attention");
      dev->Kernel(0.002);
      {
        ProfilePhase proj("mla projections");
        dev->Kernel(0.003);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the host's time is no part
      }
      dev->Kernel(0.004);
    }
    {
      ProfilePhase experts("experts");
      dev->Kernel(0.010);
    }
    { ProfilePhase empty("mla projections"); }  // a second visit adds to the same row
    dev->Kernel(0.005);
    const auto rows = profile.End();
    InstallStepProfile(nullptr);
    EXPECT_EQ(dev->waited(), dev->last()) << "End waits for its own end mark before reading";
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0].first, "other");  // then in the order first entered
    EXPECT_EQ(rows[1].first, "attention");
    EXPECT_EQ(rows[2].first, "mla projections");
    EXPECT_EQ(rows[3].first, "experts");
    const auto m = AsMap(rows);
    EXPECT_NEAR(m.at("other"), 0.006, 1e-12);
    EXPECT_NEAR(m.at("attention"), 0.006, 1e-12);
    EXPECT_NEAR(m.at("mla projections"), 0.003, 1e-12);
    EXPECT_NEAR(m.at("experts"), 0.010, 1e-12);
    double sum = 0;
    for (const auto& [name, t] : rows) sum += t;
    EXPECT_NEAR(sum, 0.025, 1e-12) << "the rows add up to the step";
    EXPECT_EQ(live, 0) << "End releases its marks";
    profile.Begin();
    dev->Kernel(1.0);
    EXPECT_EQ(live, 1);
  }
  EXPECT_EQ(live, 0) << "the destructor releases a step never ended";
}

TEST(StepProfile, AStepBegunInsideAScopeStartsInItsPhase) {
  int live = 0;
  auto owned = std::make_unique<FakeStream>(&live);
  FakeStream* dev = owned.get();
  StepProfile profile(std::move(owned));
  InstallStepProfile(&profile);
  {
    ProfilePhase opt("optimizer");  // entered before the step began: not marked, but open
    profile.Begin();
    dev->Kernel(0.002);
  }
  dev->Kernel(0.001);
  const auto rows = profile.End();
  InstallStepProfile(nullptr);
  ASSERT_EQ(rows.size(), 2u) << "one row a phase";
  EXPECT_EQ(rows[0].first, "other") << "other first, though the step began in another phase";
  const auto m = AsMap(rows);
  EXPECT_NEAR(m.at("optimizer"), 0.002, 1e-12);
  EXPECT_NEAR(m.at("other"), 0.001, 1e-12);
}

TEST(StepProfile, NothingIsMarkedWithoutAnInstalledProfile) {
  int live = 0;
  auto owned = std::make_unique<FakeStream>(&live);
  FakeStream* dev = owned.get();
  StepProfile profile(std::move(owned));
  profile.Begin();
  EXPECT_EQ(live, 1);
  {
    ProfilePhase attn("attention");  // not installed: no mark
    dev->Kernel(0.5);
  }
  EXPECT_EQ(live, 1);
  EXPECT_NEAR(AsMap(profile.End()).at("other"), 0.5, 1e-12);
  EXPECT_TRUE(profile.End().empty()) << "an End without a Begin has no rows";
  EXPECT_EQ(InstalledStepProfile(), nullptr);
}

}  // namespace
}  // namespace moe::parallel
