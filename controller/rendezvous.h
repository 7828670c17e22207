// The key-value store the ranks of an attempt rendezvous through (Gloo addresses, NCCL unique ids).
// In memory: an attempt that outlives a controller restart has already rendezvoused. Waits are
// callbacks, so a waiting RPC holds no thread.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::controller {

class RendezvousStore {
 public:
  void Set(const std::string& key, const std::string& value);
  std::optional<std::string> Get(const std::string& key) const;
  // Calls done exactly once: OK when every key exists, DEADLINE_EXCEEDED at `deadline` (monotonic
  // seconds, checked by Expire).
  void Wait(const std::vector<std::string>& keys, double deadline, std::function<void(Status)> done);
  void Expire(double now);
  void ErasePrefix(const std::string& prefix);
  size_t size() const;

 private:
  struct Waiter {
    std::vector<std::string> keys;
    double deadline;
    std::function<void(Status)> done;
  };
  bool Ready(const Waiter& w) const;
  mutable std::mutex mu_;
  std::map<std::string, std::string> kv_;
  std::vector<Waiter> waiters_;
};

}  // namespace moe::controller
