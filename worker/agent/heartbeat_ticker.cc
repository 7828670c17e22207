#include "worker/agent/heartbeat_ticker.h"

#include <algorithm>
#include <random>

#include "common/log.h"

namespace moe::worker {

HeartbeatTicker& HeartbeatTicker::Process() {
  static HeartbeatTicker* const ticker = new HeartbeatTicker();  // never destroyed: its thread
  return *ticker;                                                // may outlive main's statics
}

HeartbeatTicker& HeartbeatTicker::Group(int group) {
  if (group < 0) return Process();
  static std::mutex mu;
  static auto* const tickers = new std::map<int, HeartbeatTicker*>();  // never destroyed, as above
  std::lock_guard<std::mutex> lock(mu);
  HeartbeatTicker*& t = (*tickers)[group];
  if (t == nullptr) t = new HeartbeatTicker();
  return *t;
}

int64_t HeartbeatTicker::Add(Beat beat, std::function<double()> period) {
  thread_local std::mt19937 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = next_id_++;
  const double first = period() * std::uniform_real_distribution<double>(0.05, 1.0)(rng);
  due_.emplace(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(first)),
               id);
  entries_.emplace(id, Entry{std::move(beat), std::move(period)});
  if (!started_) {
    started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  cv_.notify_all();
  return id;
}

void HeartbeatTicker::Remove(int64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  entries_.erase(id);
  cv_.wait(lock, [&] { return calling_ != id; });
}

// A beat that held the ticker up held up every agent on this ticker (the process's, or its
// group's): said (once in 10 s at most per ticker), since their leases may run out meanwhile.
void HeartbeatTicker::NoteSlowBeat(Clock::duration took) {
  const double s = std::chrono::duration<double>(took).count();
  if (s < 0.5) return;
  const auto now = Clock::now();
  if (now - last_slow_note_ < std::chrono::seconds(10)) return;
  last_slow_note_ = now;
  MOE_LOG(WARNING) << "a heartbeat took " << s
                   << " s to send (its stream's write blocked): the other agents beating from its "
                      "ticker waited for it";
}

void HeartbeatTicker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto [due, id] = due_.top();
    const auto it = entries_.find(id);
    if (it == entries_.end()) {  // removed
      due_.pop();
      continue;
    }
    if (Clock::now() < due) {
      // Or an earlier one added meanwhile. kCoalesce late: the beats due by then go in one wake
      // (2,048 fake nodes of a process: 100 wakes a second, not 2,048).
      cv_.wait_until(lock, due + kCoalesce);
      continue;
    }
    due_.pop();
    const Beat beat = it->second.beat;
    calling_ = id;
    lock.unlock();
    const auto t0 = Clock::now();
    beat();
    NoteSlowBeat(Clock::now() - t0);
    lock.lock();
    calling_ = 0;
    cv_.notify_all();  // a Remove waiting for this beat
    if (const auto again = entries_.find(id); again != entries_.end()) {
      // On schedule, but never in the past: after a stall each agent beats once, not once for
      // every period it missed.
      const auto next = due + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(again->second.period()));
      due_.emplace(std::max(next, Clock::now()), id);
    }
  }
}

}  // namespace moe::worker
