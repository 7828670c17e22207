// Time, injected: every timer of the controller reads a Clock, so tests drive leases and timeouts
// with a fake one they advance by hand.
#pragma once

#include <atomic>
#include <chrono>

namespace moe::controller {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch (wall clock, for records) and a monotonic reading (for timers).
  virtual double Now() const = 0;
  virtual double Monotonic() const = 0;
};

class RealClock final : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  double Monotonic() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(double start = 1.8e9) : now_(start) {}
  double Now() const override { return now_.load(); }
  double Monotonic() const override { return now_.load(); }
  void Advance(double seconds) { now_ = now_.load() + seconds; }

 private:
  std::atomic<double> now_;
};

}  // namespace moe::controller
