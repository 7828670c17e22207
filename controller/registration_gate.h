// How many registrations the controller admits at once, and which names are being registered: a
// herd (a controller restart, a cluster coming up) is told to come back after a jittered delay
// (UNAVAILABLE, "retry after N ms", which the agent honours) instead of queueing behind the change
// lock, so the registered workers' heartbeats always get through (docs/architecture.md, "Leases").
//
// Thread-safety: every method may be called from any thread (an atomic and its own lock).
#pragma once

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "common/status.h"

namespace moe::controller {

class RegistrationGate {
 public:
  static constexpr int kMaxInFlight = 32;

  // A registration may start; End when it is over (only after an OK Begin).
  Status Begin() {
    if (++in_flight_ <= kMaxInFlight) return OkStatus();
    --in_flight_;
    return UnavailableError("register: the controller is admitting " +
                            std::to_string(kMaxInFlight) + " registrations at once; retry after " +
                            std::to_string(RetryAfterMs()) + " ms");
  }
  void End() { --in_flight_; }
  // Milliseconds a refused registration waits: jittered, longer the more are in flight.
  int RetryAfterMs() const {
    static thread_local std::mt19937 rng{std::random_device{}()};
    const int base = 250 + 20 * in_flight_.load();
    return base + static_cast<int>(rng() % static_cast<unsigned>(2 * base));
  }
  // A name held from the registration's checks to its record applied; false when another stream
  // registers it now.
  bool Reserve(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return names_.insert(name).second;
  }
  void Release(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    names_.erase(name);
  }
  size_t reserved() const {
    std::lock_guard<std::mutex> lock(mu_);
    return names_.size();
  }

 private:
  std::atomic<int> in_flight_{0};
  mutable std::mutex mu_;
  std::set<std::string> names_;
};

}  // namespace moe::controller
