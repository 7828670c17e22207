#include "controller/lease_book.h"

#include <algorithm>

#include "common/log.h"

namespace moe::controller {

void LeaseBook::Open(const std::string& name, const void* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  Lease& l = leases_[name];
  l.channel = channel;
  l.heard = HearingNowLocked();
  l.heard_wall = clock_.Now();
  l.grace = std::max(lease_, kAnswerGraceSeconds);
  l.open = true;
  QueueLocked(name, l);
}

bool LeaseBook::Answered(const std::string& name, const void* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(name);
  if (it == leases_.end() || !it->second.open || it->second.channel != channel) return false;
  it->second.heard = HearingNowLocked();
  return true;
}

void LeaseBook::QueueLocked(const std::string& name, Lease& l) {
  const double at = l.heard + lease_ + l.grace;
  if (l.queued_at >= 0 && l.queued_at <= at) return;  // its entry comes due no later
  l.queued_at = at;                                   // an entry queued before is stale now
  due_.emplace(at, name);
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
  if (it->second.grace > 0) {  // first heard: the plain lease from now, looked at in time
    it->second.grace = 0;
    QueueLocked(name, it->second);
  }
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
  while (!due_.empty() && due_.top().first < now) {
    const auto [at, name] = due_.top();
    due_.pop();
    auto it = leases_.find(name);
    if (it == leases_.end() || it->second.queued_at != at) continue;  // stale entry
    Lease& l = it->second;
    l.queued_at = -1;
    if (!l.open) continue;  // closed meanwhile; Open queues it again
    if (now - l.heard > lease_ + l.grace) {
      l.open = false;
      out.push_back(name);
    } else {
      QueueLocked(name, l);  // renewed since: due a lease after its last renewal
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
