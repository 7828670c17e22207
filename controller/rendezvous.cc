#include "controller/rendezvous.h"

namespace moe::controller {

std::string RendezvousStore::FirstMissing(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!kv_.count(k)) return k;
  }
  return "";
}

Status RendezvousStore::Set(const std::string& key, const std::string& value) {
  std::vector<std::function<void(Status)>> ready;
  {
    MutexLock lock(&mu_);
    auto old = kv_.find(key);
    const size_t before = old == kv_.end() ? 0 : key.size() + old->second.size();
    if (old == kv_.end() && kv_.size() >= kMaxRendezvousKeys) {
      return ResourceExhaustedError("rendezvous store: " + std::to_string(kMaxRendezvousKeys) +
                                    " keys held");
    }
    if (bytes_ - before + key.size() + value.size() > kMaxRendezvousBytes) {
      return ResourceExhaustedError(
          "rendezvous store: " + std::to_string(kMaxRendezvousBytes >> 20) + " MiB held");
    }
    bytes_ = bytes_ - before + key.size() + value.size();
    kv_[key] = value;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (FirstMissing(it->keys).empty()) {
        ready.push_back(std::move(it->done));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& d : ready) d(OkStatus());
  return OkStatus();
}

std::optional<std::string> RendezvousStore::Get(const std::string& key) const {
  MutexLock lock(&mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

void RendezvousStore::Wait(const std::vector<std::string>& keys, double deadline,
                           std::function<void(Status)> done) {
  {
    MutexLock lock(&mu_);
    if (!FirstMissing(keys).empty()) {
      waiters_.push_back({keys, deadline, std::move(done)});
      return;
    }
  }
  done(OkStatus());
}

void RendezvousStore::Expire(double now) {
  std::vector<std::pair<std::function<void(Status)>, std::string>> expired;
  {
    MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        expired.emplace_back(std::move(it->done), FirstMissing(it->keys));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [done, key] : expired) {
    done(DeadlineExceededError("rendezvous: key " + key +
                               " was not set in time (is every rank up?)"));
  }
}

void RendezvousStore::ErasePrefix(const std::string& prefix) {
  MutexLock lock(&mu_);
  for (auto it = kv_.lower_bound(prefix);
       it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    bytes_ -= it->first.size() + it->second.size();
    it = kv_.erase(it);
  }
}

size_t RendezvousStore::size() const {
  MutexLock lock(&mu_);
  return kv_.size();
}

size_t RendezvousStore::waiting() const {
  MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace moe::controller
