// One thread sends the heartbeats of every agent in the process: a node agent's one, and each fake
// node's of `moe-worker --fake-workers N` (a thread each would be 16,384 threads waking once a
// second at the benchmark's size, on the core the controller's figures are measured beside).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

namespace moe::worker {

class HeartbeatTicker {
 public:
  using Beat = std::function<void()>;
  // The process's ticker (its thread starts with the first Add and lives as long as the process).
  static HeartbeatTicker& Process();
  // The ticker of one group of agents (fake mode: a stream write that blocks holds up only the
  // agents of its group, not the process's thousands). Group -1 is Process().
  static HeartbeatTicker& Group(int group);
  // Calls `beat` every period() seconds (read again after each beat), the first after a random
  // share of one period so that agents that start together spread over the second.
  int64_t Add(Beat beat, std::function<double()> period);
  // Once it returns, the beat of `id` is not running and never runs again.
  void Remove(int64_t id);

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kCoalesce{
      10};  // how late a beat may go, to share a wake
  struct Entry {
    Beat beat;
    std::function<double()> period;
  };
  void Loop();
  void NoteSlowBeat(Clock::duration took);  // the ticker's thread alone

  Clock::time_point last_slow_note_{};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Entry> entries_;
  // (due, id), soonest first; an id Remove took out is skipped when it comes up.
  std::priority_queue<std::pair<Clock::time_point, int64_t>,
                      std::vector<std::pair<Clock::time_point, int64_t>>, std::greater<>>
      due_;
  int64_t next_id_ = 1;
  int64_t calling_ = 0;  // the beat running now (outside the lock), 0: none
  bool started_ = false;
};

}  // namespace moe::worker
