// The rank-process module: lines routed from the report stream and the output, the final record,
// crashes, stops with a grace, and starting children from a busy multi-threaded parent.
#include "common/rank_process.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace moe {
namespace {

// A child that runs `script` in /bin/sh (its fd 3 is the report stream).
RankCommand Shell(const std::string& script) {
  RankCommand c;
  c.program = "/bin/sh";
  c.args = {"-c", script};
  return c;
}

TEST(RankProcessTest, RoutesReportsOutputAndTheFinalRecord) {
  const std::string record =
      RankEndJson(RankEndFor(FailedPreconditionError("a checkpoint of another layout")));
  auto p = RankProcess::Start(
      Shell("echo '{\"step\":1}' >&3; echo hello; echo oops >&2; echo '{\"step\":2}' >&3; "
            "echo '" +
            record + "' >&3; exit 4"));
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> reports, output;
  const RankExit e = (*p)->Wait([&](const std::string& l) { reports.push_back(l); },
                                [&](const std::string& l) { output.push_back(l); });
  EXPECT_EQ(reports, (std::vector<std::string>{"{\"step\":1}",
                                               "{\"step\":2}"}));  // the record is not a report
  EXPECT_EQ(output.size(), 2u);
  EXPECT_EQ(e.exit_code(), 4);
  ASSERT_TRUE(e.record.has_value());
  const RankEnd end = e.Outcome();
  EXPECT_EQ(end.failure_class, FailureClass::kPermanent);
  EXPECT_EQ(end.code, StatusCode::kFailedPrecondition);
  EXPECT_EQ(end.message, "a checkpoint of another layout");
}

TEST(RankProcessTest, ACrashWithoutARecordIsTransientAndKeepsTheLastOutput) {
  auto p = RankProcess::Start(Shell("echo about to crash; kill -9 $$"));
  ASSERT_TRUE(p.ok());
  const RankExit e = (*p)->Wait();
  EXPECT_FALSE(e.exited());
  EXPECT_EQ(e.exit_code(), -9);
  const RankEnd end = e.Outcome();
  EXPECT_EQ(end.failure_class, FailureClass::kTransient);
  EXPECT_NE(end.message.find("killed by signal 9"), std::string::npos) << end.message;
  EXPECT_NE(end.message.find("about to crash"), std::string::npos) << end.message;
}

TEST(RankProcessTest, ExitZeroWithoutARecordSucceeded) {
  auto p = RankProcess::Start(Shell("exit 0"));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->Wait().Outcome().ok());
}

TEST(RankProcessTest, RequestStopSendsTermAndTheChildStopsInTime) {
  // The child stops on SIGTERM with the "stopped" record, as a rank does at its next step boundary.
  const std::string record = RankEndJson(StoppedRankEnd("asked to stop"));
  auto p = RankProcess::Start(
      Shell("stop() { echo '" + record +
            "' >&3; exit 3; }; trap stop TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.ok());
  bool ready = false;
  while (!ready && (*p)->Pump(1.0, nullptr, [&](const std::string& l) { ready = l == "ready"; })) {
  }
  ASSERT_TRUE(ready);
  (*p)->RequestStop(30);
  const auto t0 = std::chrono::steady_clock::now();
  const RankExit e = (*p)->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE((*p)->stop_requested());
  EXPECT_EQ(e.exit_code(), kExitStopped);
  EXPECT_EQ(e.Outcome().failure_class, FailureClass::kStopped);
}

TEST(RankProcessTest, AChildIgnoringTermIsKilledAfterTheGrace) {
  auto p = RankProcess::Start(Shell("trap '' TERM; echo ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(p.ok());
  bool ready = false;
  while (!ready && (*p)->Pump(1.0, nullptr, [&](const std::string& l) { ready = l == "ready"; })) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  (*p)->RequestStop(0.5);
  const RankExit e = (*p)->Wait();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.exit_code(), -9);
  EXPECT_GE(took, 0.4);
  EXPECT_LT(took, 5.0);
}

TEST(RankProcessTest, AMissingProgramFailsInTheChildWithCode127) {
  RankCommand c;
  c.program = "/nonexistent/moe-train";
  auto p = RankProcess::Start(c);
  ASSERT_TRUE(p.ok());
  std::vector<std::string> output;
  const RankExit e = (*p)->Wait(nullptr, [&](const std::string& l) { output.push_back(l); });
  EXPECT_EQ(e.exit_code(), 127);
  ASSERT_FALSE(output.empty());
  EXPECT_NE(output.back().find("exec failed"), std::string::npos);
}

// Between fork and exec the child must not allocate: with other threads allocating all the time, a
// child that took malloc's lock would hang. Many starts under that load must all finish.
TEST(RankProcessTest, StartsFromABusyMultiThreadedParent) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (int t = 0; t < 4; ++t) {
    churn.emplace_back([&] {
      while (!stop) {
        std::vector<std::string> v;
        for (int i = 0; i < 64; ++i) v.emplace_back(static_cast<size_t>(100 + i * 37), 'x');
      }
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 60; ++i) {
    auto p = RankProcess::Start(Shell("echo '{\"step\":1}' >&3"));
    ASSERT_TRUE(p.ok());
    int reports = 0;
    (*p)->Wait([&](const std::string&) { ++reports; });
    EXPECT_EQ(reports, 1);
  }
  stop = true;
  for (auto& t : churn) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

TEST(RankProcessTest, TheDestructorKillsARunningChild) {
  pid_t pid = -1;
  {
    auto p = RankProcess::Start(Shell("while :; do sleep 0.05; done"));
    ASSERT_TRUE(p.ok());
    pid = (*p)->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

}  // namespace
}  // namespace moe
