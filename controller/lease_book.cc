#include "controller/lease_book.h"

#include "common/log.h"

namespace moe::controller {

void LeaseBook::Open(const std::string& name, const void* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  Lease& l = leases_[name];
  l.channel = channel;
  l.heard = HearingNowLocked();
  l.heard_wall = clock_.Now();
  l.open = true;
}

void LeaseBook::Close(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(name);
  if (it != leases_.end()) it->second.open = false;
}

bool LeaseBook::Renew(const std::string& name, const void* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(name);
  if (it == leases_.end() || !it->second.open || it->second.channel != channel) return false;
  it->second.heard = HearingNowLocked();
  it->second.heard_wall = clock_.Now();
  return true;
}

void LeaseBook::NoteTick() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_.Monotonic();
  if (last_tick_ >= 0 && now - last_tick_ > kStallSeconds) {
    const double gap = now - last_tick_;
    stalled_ += gap;
    MOE_LOG(WARNING) << "the controller did not tick for " << gap
                     << " s (stopped, starved or frozen): every lease gets that time back";
  }
  last_tick_ = now;
}

std::vector<std::string> LeaseBook::Expire() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  const double now = HearingNowLocked();
  for (auto& [name, l] : leases_) {
    if (l.open && now - l.heard > lease_) {
      l.open = false;
      out.push_back(name);
    }
  }
  return out;
}

double LeaseBook::LastHeard(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(name);
  return it == leases_.end() ? 0 : it->second.heard_wall;
}

double LeaseBook::stalled_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stalled_;
}

}  // namespace moe::controller
