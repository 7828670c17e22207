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
  const auto due = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(first));
  // The loop sleeps until its earliest beat: woken only when this one comes before it (a herd
  // of registrations woke it thousands of times a second for nothing).
  const bool sooner = due_.empty() || due < due_.top().first;
  due_.emplace(due, id);
  entries_.emplace(id, Entry{std::move(beat), std::move(period)});
  if (!started_) {
    started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
  if (sooner) cv_.notify_all();
  return id;
}

void HeartbeatTicker::Remove(int64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  entries_.erase(id);
  slow_.erase(id);
  ++removing_;
  done_cv_.wait(lock, [&] { return calling_ != id && slow_calling_ != id; });
  --removing_;
}

void HeartbeatTicker::Slow(int64_t id, Beat work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!entries_.count(id) || !slow_.emplace(id, std::move(work)).second) return;
  if (!slow_started_) {
    slow_started_ = true;
    std::thread([this] { SlowLoop(); }).detach();
  }
  slow_cv_.notify_one();
}

void HeartbeatTicker::SlowLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (slow_.empty()) {
      slow_cv_.wait(lock);
      continue;
    }
    auto first = slow_.begin();
    const int64_t id = first->first;
    const Beat work = std::move(first->second);
    slow_.erase(first);
    slow_calling_ = id;
    lock.unlock();
    const auto t0 = Clock::now();
    work();
    NoteSlowBeat(Clock::now() - t0);
    lock.lock();
    slow_calling_ = 0;
    if (removing_ > 0) done_cv_.notify_all();  // a Remove waiting for it
  }
}

// Slow work that held the slow lane up held up the stream heartbeats of the other agents on this
// ticker (the process's, or its group's): said (once in 10 s at most per ticker), since the leases
// of those whose UDP goes unanswered may run out meanwhile.
void HeartbeatTicker::NoteSlowBeat(Clock::duration took) {
  const double s = std::chrono::duration<double>(took).count();
  if (s < 0.5) return;
  const auto now = Clock::now();
  if (now - last_slow_note_ < std::chrono::seconds(10)) return;
  last_slow_note_ = now;
  MOE_LOG(WARNING)
      << "a heartbeat on a stream took " << s
      << " s to send (its write blocked): the stream heartbeats of the other agents of "
         "its ticker waited for it (their UDP heartbeats did not)";
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
      // (2,048 fake nodes of a process: 20 wakes a second per ticker, not 2,048).
      cv_.wait_until(lock, due + kCoalesce);
      continue;
    }
    due_.pop();
    const Beat beat = it->second.beat;
    calling_ = id;
    lock.unlock();
    beat();
    lock.lock();
    calling_ = 0;
    if (removing_ > 0) done_cv_.notify_all();  // a Remove waiting for this beat
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
