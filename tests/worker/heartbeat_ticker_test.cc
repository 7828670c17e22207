// The heartbeat tickers of the agent process: one per process, or one per group of fake agents, so
// that a beat whose stream write blocks (a congested connection) holds up only its own group.
#include "worker/agent/heartbeat_ticker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace moe::worker {
namespace {

TEST(HeartbeatTickerTest, GroupsAreTickersOfTheirOwnAndMinusOneIsTheProcesss) {
  EXPECT_EQ(&HeartbeatTicker::Group(-1), &HeartbeatTicker::Process());
  EXPECT_EQ(&HeartbeatTicker::Group(7), &HeartbeatTicker::Group(7));
  EXPECT_NE(&HeartbeatTicker::Group(7), &HeartbeatTicker::Group(8));
  EXPECT_NE(&HeartbeatTicker::Group(7), &HeartbeatTicker::Process());
}

// One group's beat blocks for a second and a half; another group's agent, beating every 50 ms,
// keeps beating meanwhile (on the one process ticker it would have waited the whole time). The
// blocked group's other agent waits: a ticker calls its beats one at a time.
TEST(HeartbeatTickerTest, ABlockedBeatHoldsUpOnlyItsGroup) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> blocked_calls{0}, same_group{0}, other_group{0};
  HeartbeatTicker& a = HeartbeatTicker::Group(101);
  HeartbeatTicker& b = HeartbeatTicker::Group(102);
  const int64_t stuck = a.Add(
      [&] {
        if (blocked_calls++ == 0) released.wait();
      },
      [] { return 0.05; });
  // Let the stuck beat start blocking before the others are added.
  for (int i = 0; i < 200 && blocked_calls == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(blocked_calls, 1);
  const int64_t neighbour = a.Add([&] { ++same_group; }, [] { return 0.05; });
  const int64_t other = b.Add([&] { ++other_group; }, [] { return 0.05; });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const int other_while_blocked = other_group, same_while_blocked = same_group;
  release.set_value();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  a.Remove(stuck);
  a.Remove(neighbour);
  b.Remove(other);
  EXPECT_GE(other_while_blocked, 10) << "the other group's agent beat every 50 ms for 1.5 s";
  EXPECT_EQ(same_while_blocked, 0) << "the blocked group's other agent waited for the beat";
  EXPECT_GE(same_group.load(), 1) << "and beat once it was released";
  EXPECT_GE(blocked_calls.load(), 2) << "the released agent beats again";
}

// Slow work (a stream heartbeat, the fallback while UDP goes unanswered) runs on the ticker's slow
// lane: while one agent's stream write blocks for a second and a half, the beats of the same
// ticker's other agent go on every 50 ms; the blocked agent's later slow work is not queued again
// and again (one pending per agent), and Remove waits for slow work that is running.
TEST(HeartbeatTickerTest, SlowWorkBlocksNeitherTheTickerNorPilesUp) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> beats{0}, slow_runs{0}, neighbour_beats{0};
  HeartbeatTicker& t = HeartbeatTicker::Group(103);
  auto id = std::make_shared<std::atomic<int64_t>>(0);
  const int64_t stuck = t.Add(
      [&, id] {
        ++beats;
        t.Slow(id->load(), [&] {
          if (slow_runs++ == 0) released.wait();
        });
      },
      [] { return 0.05; });
  id->store(stuck);
  for (int i = 0; i < 200 && slow_runs == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(slow_runs, 1) << "the slow work started (and blocks)";
  const int64_t neighbour = t.Add([&] { ++neighbour_beats; }, [] { return 0.05; });
  const int beats_before = beats;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const int neighbour_while_blocked = neighbour_beats, beats_while_blocked = beats - beats_before;
  release.set_value();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  t.Remove(stuck);
  const int slow_after_remove = slow_runs;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  t.Remove(neighbour);
  EXPECT_GE(neighbour_while_blocked, 10) << "the ticker's other agent beat every 50 ms";
  EXPECT_GE(beats_while_blocked, 10) << "the blocked agent's own beats went on (its UDP path)";
  // Released: one pending slow work ran (the rest were not queued while one was pending), then one
  // each 50 ms for the 300 ms before Remove.
  EXPECT_GE(slow_after_remove, 2);
  EXPECT_LE(slow_after_remove, 2 + 8) << "not one per beat missed while blocked (30 beats)";
  EXPECT_EQ(slow_runs.load(), slow_after_remove) << "no slow work runs after Remove";
}

}  // namespace
}  // namespace moe::worker
