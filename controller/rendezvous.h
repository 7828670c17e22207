// The key-value store the ranks of an attempt rendezvous through (Gloo addresses, NCCL unique ids).
// In memory: an attempt that outlives a controller restart has already rendezvoused. Waits are
// callbacks, so a waiting RPC holds no thread.
//
// Threads: gRPC's callback threads call Set, Get and Wait (RendezvousSet/Get/Wait); the Controller
// calls Expire (from Tick) and ErasePrefix (when an attempt ends), under its own mutex. A Wait's
// callback runs on the thread that fulfils or expires it, after the store's lock is released, so it
// may call back into the store.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "common/status.h"

namespace moe::controller {

// Limits: callers (the WorkerService) check key and value sizes; the store refuses growth past its
// totals with RESOURCE_EXHAUSTED. An attempt's keys are erased when it ends.
inline constexpr size_t kMaxRendezvousKeyBytes = 512;
inline constexpr size_t kMaxRendezvousValueBytes = 64 << 10;
inline constexpr size_t kMaxRendezvousKeys = 1 << 16;
inline constexpr size_t kMaxRendezvousBytes = 64 << 20;

class RendezvousStore {
 public:
  Status Set(const std::string& key, const std::string& value) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<std::string> Get(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls done exactly once: OK when every key exists, DEADLINE_EXCEEDED at `deadline` (monotonic
  // seconds of the controller's Clock, checked by Expire).
  void Wait(const std::vector<std::string>& keys, double deadline, std::function<void(Status)> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Expire(double now) ABSL_LOCKS_EXCLUDED(mu_);
  void ErasePrefix(const std::string& prefix) ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t waiting() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    std::vector<std::string> keys;
    double deadline;
    std::function<void(Status)> done;
  };
  // The first of `keys` not set yet; empty when all are.
  std::string FirstMissing(const std::vector<std::string>& keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // keys and values in kv_
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::controller
