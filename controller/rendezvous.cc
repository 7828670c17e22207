#include "controller/rendezvous.h"

namespace moe::controller {

bool RendezvousStore::Ready(const Waiter& w) const {
  for (const auto& k : w.keys) if (!kv_.count(k)) return false;
  return true;
}

void RendezvousStore::Set(const std::string& key, const std::string& value) {
  std::vector<std::function<void(Status)>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (Ready(*it)) {
        ready.push_back(std::move(it->done));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& d : ready) d(OkStatus());
}

std::optional<std::string> RendezvousStore::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

void RendezvousStore::Wait(const std::vector<std::string>& keys, double deadline, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Waiter w{keys, deadline, std::move(done)};
    if (!Ready(w)) {
      waiters_.push_back(std::move(w));
      return;
    }
    done = std::move(w.done);
  }
  done(OkStatus());
}

void RendezvousStore::Expire(double now) {
  std::vector<std::pair<std::function<void(Status)>, std::string>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        std::string missing;
        for (const auto& k : it->keys) if (!kv_.count(k)) { missing = k; break; }
        expired.emplace_back(std::move(it->done), missing);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [d, key] : expired) d(DeadlineExceededError("rendezvous: key " + key + " was not set in time (is every rank up?)"));
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) it = kv_.erase(it);
}

size_t RendezvousStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_.size();
}

}  // namespace moe::controller
