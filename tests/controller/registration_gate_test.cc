// The registration gate (controller/registration_gate.h): 32 registrations in flight at most; a
// refused agent is handed the next slot of the gate's own pace (32 over the mean time a
// registration takes), so a herd comes back spread over the time the controller needs, never
// sooner than 250 ms and never later than 300 s.
#include "controller/registration_gate.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace moe::controller {
namespace {

// The "retry after N ms" of a refusal, in seconds (-1: none).
double HintSeconds(const Status& st) {
  const size_t at = st.message().find("retry after ");
  if (at == std::string::npos) return -1;
  return std::atof(st.message().c_str() + at + 12) / 1000.0;
}

struct GateTest : ::testing::Test {
  double now = 1000;
  RegistrationGate gate{[this] { return now; }};

  // Fills the gate: kMaxInFlight admitted, their admission times returned.
  std::vector<double> Fill() {
    std::vector<double> admitted;
    for (int i = 0; i < RegistrationGate::kMaxInFlight; ++i) {
      StatusOr<double> a = gate.Begin();
      EXPECT_TRUE(a.ok()) << a.status().ToString();
      if (a.ok()) admitted.push_back(*a);
    }
    return admitted;
  }
};

TEST_F(GateTest, AdmitsThirtyTwoAndRefusesTheNextWithAHint) {
  Fill();
  StatusOr<double> refused = gate.Begin();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("32 registrations at once"), std::string::npos)
      << refused.status().message();
  EXPECT_GE(HintSeconds(refused.status()), RegistrationGate::kMinRetrySeconds - 1e-3);
  EXPECT_EQ(gate.refused(), 1);
  gate.End(now);  // one over: the next is admitted
  EXPECT_TRUE(gate.Begin().ok());
}

// 6,400 refused at once: each a slot of its own, 1/rate apart, spread over 6,400/rate seconds up
// to the cap (300 s: 4,800 at 16 a second), the rest waiting at the cap.
TEST_F(GateTest, AHerdIsSpreadOverTheTimeTheGateNeedsToAdmitIt) {
  for (int round = 0; round < 60; ++round) {  // every registration takes 2 s: 16 a second
    std::vector<double> admitted = Fill();
    now += 2.0;
    for (double a : admitted) gate.End(a);
  }
  Fill();
  const double rate = gate.Rate();
  EXPECT_NEAR(rate, 16.0, 0.5);
  std::vector<double> hints;
  for (int i = 0; i < 6400; ++i) {
    StatusOr<double> r = gate.Begin();
    ASSERT_FALSE(r.ok());
    hints.push_back(HintSeconds(r.status()));
  }
  const double spacing = 1.0 / rate;
  for (size_t i = 0; i < 6400; ++i) {
    if (RegistrationGate::kMinRetrySeconds + i * spacing > RegistrationGate::kMaxRetrySeconds - 1) {
      // Past the cap: a spread wait at the cap.
      EXPECT_LE(hints[i], RegistrationGate::kMaxRetrySeconds + spacing + 1e-3) << i;
      EXPECT_GE(hints[i], RegistrationGate::kMaxRetrySeconds / 2 - 1e-3) << i;
      continue;
    }
    // In its own slot: [0.25 + i/rate, 0.25 + (i+1)/rate) (the hint is whole milliseconds).
    EXPECT_GE(hints[i], RegistrationGate::kMinRetrySeconds + i * spacing - 1e-3) << i;
    EXPECT_LE(hints[i], RegistrationGate::kMinRetrySeconds + (i + 1) * spacing + 1e-3) << i;
  }
  EXPECT_NEAR(gate.Backlog(), RegistrationGate::kMaxRetrySeconds, spacing + 1);
  // Time passes: the backlog shrinks with it, and a refusal then goes after the slots handed out.
  now += 100;
  EXPECT_NEAR(gate.Backlog(), RegistrationGate::kMaxRetrySeconds - 100, spacing + 1);
  StatusOr<double> later = gate.Begin();
  ASSERT_FALSE(later.ok());
  EXPECT_GE(HintSeconds(later.status()), RegistrationGate::kMaxRetrySeconds - 100 - 1e-3);
}

// A fast controller: the slots are close, and a herd of 1,000 comes back within a fraction of a
// second past the minimum wait; slots handed out in the past are not waited for.
TEST_F(GateTest, AFastGateSpacesItsSlotsClosely) {
  for (int round = 0; round < 60; ++round) {  // 1 ms each: 32,000 a second
    std::vector<double> admitted = Fill();
    now += 0.001;
    for (double a : admitted) gate.End(a);
  }
  Fill();
  EXPECT_GT(gate.Rate(), 20000);
  double last = 0;
  for (int i = 0; i < 1000; ++i) {
    StatusOr<double> r = gate.Begin();
    ASSERT_FALSE(r.ok());
    last = HintSeconds(r.status());
  }
  EXPECT_LT(last, RegistrationGate::kMinRetrySeconds + 0.1);
  now += 10;  // every slot is in the past
  EXPECT_EQ(gate.Backlog(), 0);
  StatusOr<double> r = gate.Begin();
  ASSERT_FALSE(r.ok());
  EXPECT_NEAR(HintSeconds(r.status()), RegistrationGate::kMinRetrySeconds, 0.01);
}

TEST_F(GateTest, ReservesANameOnce) {
  EXPECT_TRUE(gate.Reserve("a"));
  EXPECT_FALSE(gate.Reserve("a"));
  EXPECT_EQ(gate.reserved(), 1u);
  EXPECT_TRUE(gate.Reserve("big", 256)) << "an agent of 256 devices counts them all";
  EXPECT_EQ(gate.reserved(), 257u);
  gate.Release("big");
  EXPECT_EQ(gate.reserved(), 1u);
  gate.Release("a");
  EXPECT_TRUE(gate.Reserve("a"));
}

// What a restarted controller's reconnect grace reads: the gate is quiet only once nothing is in
// flight and the latest time it told a refused agent to come back has passed, counted from Open at
// the earliest; those told to wait at the 300 s cap count too.
TEST_F(GateTest, QuietOnlyOnceTheHerdIsInAndEveryRefusedAgentWasDue) {
  gate.Open();
  EXPECT_EQ(gate.OpenedAt(), 1000);
  EXPECT_EQ(gate.QuietSince(), 1000) << "opened, nothing came: quiet since the opening";
  now = 1005;
  std::vector<double> admitted = Fill();
  EXPECT_EQ(gate.QuietSince(), 1005) << "registrations in flight: not quiet";
  StatusOr<double> refused = gate.Begin();
  ASSERT_FALSE(refused.ok());
  const double due = now + HintSeconds(refused.status());
  now = 1006;
  for (double a : admitted) gate.End(a);
  EXPECT_NEAR(gate.QuietSince(), std::max(due, 1006.0), 0.002)
      << "quiet once the refused agent was due and the last registration ended";
  // A backlog past the cap: refused agents told to wait 150-300 s, beyond any slot.
  admitted = Fill();
  double longest = 0;
  for (int i = 0; i < 400000; ++i) {
    StatusOr<double> r = gate.Begin();
    ASSERT_FALSE(r.ok());
    longest = std::max(longest, HintSeconds(r.status()));
  }
  for (double a : admitted) gate.End(a);
  EXPECT_GT(longest, RegistrationGate::kMaxRetrySeconds / 2);
  EXPECT_NEAR(gate.QuietSince(), now + longest, 0.002)
      << "an agent told to wait at the cap is in the queue until its time";
}

}  // namespace
}  // namespace moe::controller
