// How many registrations the controller admits at once, and when each refused one should come back.
// A herd (a controller restart, a cluster coming up) is not queued behind the change lock: beyond
// kMaxInFlight registrations in flight an agent is told UNAVAILABLE "retry after N ms" (which the
// agent honours), so the registered workers' heartbeats always get through (docs/architecture.md,
// "Leases").
//
// The hint is a slot, not a guess: the gate knows its own pace (by Little's law, kMaxInFlight over
// the mean time a registration takes) and hands each refused agent the next free slot of that pace,
// so a herd of 16,384 comes back spread over the time the controller needs to admit them, at about
// the rate it admits, instead of every refused agent retrying within a few seconds (16,384 agents
// retrying every 1-3 s were 8,000 refused streams a second: the controller's core went to
// refusing).
//
// Thread-safety: every method may be called from any thread (an atomic and its own lock).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "common/status.h"

namespace moe::controller {

class RegistrationGate {
 public:
  static constexpr int kMaxInFlight = 32;
  // A refused agent waits at least this long (its stream and a new one are not free either).
  static constexpr double kMinRetrySeconds = 0.25;
  // And at most this long (agents accept hints under 600 s); beyond it the queue is a backlog of
  // many minutes and the agents past it come back at the cap, spread by the jitter.
  static constexpr double kMaxRetrySeconds = 300;
  // Before any registration has been timed: 50 ms each (640 a second at 32 in flight).
  static constexpr double kInitialSeconds = 0.05;

  // `now`: a monotonic clock in seconds (tests pass their own).
  explicit RegistrationGate(std::function<double()> now = SteadySeconds);

  // A registration may start: its admission time, to pass to End. Or UNAVAILABLE with the slot to
  // come back in ("retry after N ms").
  StatusOr<double> Begin();
  // The registration admitted at `admitted` is over (registered or refused).
  void End(double admitted);

  // Registrations a second the gate expects to admit (kMaxInFlight over the mean time one takes).
  double Rate() const;
  // Seconds until the last slot handed out (0: none ahead).
  double Backlog() const;
  int64_t refused() const { return refused_.load(); }

  // The herd, as a restarted controller's reconnect grace sees it (docs/architecture.md, "Leases").
  // Open: registrations can reach the controller from now on (its gRPC server serves). Until the
  // first Open the gate counts as opened when it was made (a controller without a server, in
  // tests).
  void Open();
  double OpenedAt() const;
  // Since when the gate has had nothing to do: the later of Open, the last registration that began,
  // ended or was refused, and the latest time a refused agent was told to come back (a future time
  // while refused agents are still due, those told to wait at the 300 s cap included); now while a
  // registration is in flight. Every agent in the gate's queue has come back by then, or is late. A
  // grace measured from here runs only once the herd is over, however slowly a loaded machine
  // admits it.
  double QuietSince() const;

  // A short jittered wait (250-500 ms) for a refusal that is not the herd's: the name is being
  // registered on another stream right now.
  int ShortRetryMs();

  // A name held from the registration's checks to its record applied, with the devices it brings;
  // false when another stream registers it now.
  bool Reserve(const std::string& name, size_t devices = 1);
  void Release(const std::string& name);
  // Devices of the registrations in flight (counted against --max-workers with those registered:
  // counting agents let 256-device registrations overshoot the limit by 1,280).
  size_t reserved() const;

  static double SteadySeconds();

 private:
  // The next slot's wait in seconds, from now.
  double NextSlot();

  const std::function<double()> now_;
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> refused_{0};
  mutable std::mutex mu_;
  double mean_seconds_ = kInitialSeconds;  // guarded by mu_: a moving mean of registrations' times
  double next_slot_ = 0;                   // guarded by mu_: the first slot not handed out
  std::mt19937 rng_{std::random_device{}()};
  std::map<std::string, size_t> names_;  // name -> its devices
  size_t devices_ = 0;
  double opened_at_ = 0;      // guarded by mu_: Open
  double last_activity_ = 0;  // guarded by mu_: the last Begin (admitted or refused) or End
  double latest_due_ = 0;     // guarded by mu_: the latest time a refused agent was told to come
};

}  // namespace moe::controller
