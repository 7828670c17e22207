// Workers' leases, kept apart from the rest of the controller's state so that a heartbeat renews
// its lease without the controller's lock or its store (docs/architecture.md, "Leases").
//
// A lease is judged against how long the controller has been able to hear, not against the wall:
// the "hearing clock" is the monotonic clock less every stall of the controller itself (a gap
// between two of its ticks longer than kStallSeconds: SIGSTOP, a machine that froze, a tick held up
// by the controller's own work). A controller that stalled for 10 s gives every lease those 10 s
// back, so its own lateness never expires a worker that kept sending.
//
// Thread-safety: every method takes the book's own lock (never held while calling out).
#pragma once

#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/clock.h"

namespace moe::controller {

class LeaseBook {
 public:
  // A tick is expected every 100 ms; a gap over this is the controller's stall, not the workers'.
  static constexpr double kStallSeconds = 1.0;

  LeaseBook(Clock& clock, double lease_seconds) : clock_(clock), lease_(lease_seconds) {}

  // A fresh registration's lease lasts this much longer (or a lease longer, if that is more) until
  // the agent is first heard from: the controller cannot see when its answer arrived, and the
  // agent beats only from then on. 16,384 fake agents on one core read some answers 8 s late.
  static constexpr double kAnswerGraceSeconds = 10.0;

  // `name` registered on the stream `channel` (any token naming it): its lease starts now, with
  // the grace above until its first message.
  void Open(const std::string& name, const void* channel);
  // The registration's answer to `name` left (its write completed): the lease, still in its grace,
  // runs from now. False as for Renew.
  bool Answered(const std::string& name, const void* channel);
  // Not leased any more (lost, left, removed).
  void Close(const std::string& name);
  // A message from `name` on `channel`: renews the lease. False when `name` holds no open lease on
  // that stream (an old stream after a reconnect, a worker already lost): nothing is renewed.
  bool Renew(const std::string& name, const void* channel);
  // Called at the start of every tick: a gap since the last one over kStallSeconds is given back.
  void NoteTick();
  // The open leases not renewed within the lease (hearing time); they are closed as returned.
  std::vector<std::string> Expire();
  // Wall-clock second `name` was last heard from (0: never).
  double LastHeard(const std::string& name) const;
  // Seconds of the controller's own stalls given back so far (for /metrics and the logs).
  double stalled_seconds() const;

 private:
  struct Lease {
    const void* channel = nullptr;
    double heard = 0;       // hearing clock
    double heard_wall = 0;  // Clock::Now
    double grace = 0;       // extra seconds until first heard from (see Open)
    bool open = false;
    double queued_at = -1;  // hearing time of its live entry in due_ (-1: none); others are stale
  };
  // When to look at a lease again (hearing clock): its last renewal seen plus the lease. A renewal
  // does not touch it (but the first, which ends a grace, queues an earlier entry); Expire looks at
  // each lease about once a lease period, not each at every tick (131,072 devices' agents ten
  // times a second).
  using Due = std::pair<double, std::string>;
  void QueueLocked(const std::string& name, Lease& l);
  double HearingNowLocked() const { return clock_.Monotonic() - stalled_; }

  Clock& clock_;
  const double lease_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Lease> leases_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
  double stalled_ = 0;
  double last_tick_ = -1;
};

}  // namespace moe::controller
