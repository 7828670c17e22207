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
  // Once it returns, the beat of `id` is not running and never runs again, nor its slow work.
  void Remove(int64_t id);
  // Work of the beat `id` that may block (a heartbeat on the agent's stream, its fallback while
  // UDP goes unanswered): run on the ticker's second thread, so that a stream write held up behind
  // a busy connection delays only other such work, never the UDP beats of the ticker's agents (at
  // 16,384 fake nodes a blocked write held 64 agents' beats for seconds and their leases ran out).
  // At most one is pending per id: a beat whose earlier slow work has not run yet adds nothing.
  void Slow(int64_t id, Beat work);

 private:
  using Clock = std::chrono::steady_clock;
  // How late a beat may go, to share a wake: 50 ms, 20 wakes a second for a ticker of 64 fake
  // nodes (at 10 ms the 256 tickers of 16,384 fake nodes woke 25,600 times a second, and each wake
  // cost a futex syscall among 17,000 sleeping threads: most of the fake side's core). A node
  // agent's one beat a second is one wake either way; a lease is seconds.
  static constexpr std::chrono::milliseconds kCoalesce{50};
  struct Entry {
    Beat beat;
    std::function<double()> period;
  };
  void Loop();
  void SlowLoop();
  void NoteSlowBeat(Clock::duration took);  // the slow lane's thread alone

  Clock::time_point last_slow_note_{};
  std::mutex mu_;
  std::condition_variable cv_;       // the ticker's thread: a beat added
  std::condition_variable slow_cv_;  // the slow lane's thread: work added
  std::condition_variable done_cv_;  // Remove: a beat or slow work finished
  int removing_ = 0;                 // Removes waiting (no wake per beat when none)
  std::map<int64_t, Entry> entries_;
  // (due, id), soonest first; an id Remove took out is skipped when it comes up.
  std::priority_queue<std::pair<Clock::time_point, int64_t>,
                      std::vector<std::pair<Clock::time_point, int64_t>>, std::greater<>>
      due_;
  int64_t next_id_ = 1;
  int64_t calling_ = 0;  // the beat running now (outside the lock), 0: none
  bool started_ = false;
  std::map<int64_t, Beat> slow_;  // pending slow work by beat id
  int64_t slow_calling_ = 0;      // the id whose slow work runs now, 0: none
  bool slow_started_ = false;
};

}  // namespace moe::worker
