#include "controller/registration_gate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace moe::controller {

RegistrationGate::RegistrationGate(std::function<double()> now) : now_(std::move(now)) {
  opened_at_ = now_();
}

double RegistrationGate::SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

StatusOr<double> RegistrationGate::Begin() {
  const double now = now_();
  if (++in_flight_ <= kMaxInFlight) {
    std::lock_guard<std::mutex> lock(mu_);
    last_activity_ = std::max(last_activity_, now);
    return now;
  }
  --in_flight_;
  ++refused_;
  const double wait = NextSlot();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_activity_ = std::max(last_activity_, now);
    latest_due_ = std::max(latest_due_, now + wait);
  }
  const int ms = static_cast<int>(std::lround(wait * 1000));
  return UnavailableError("register: the controller is admitting " + std::to_string(kMaxInFlight) +
                          " registrations at once (about " +
                          std::to_string(static_cast<int>(Rate())) + " a second); retry after " +
                          std::to_string(ms) + " ms");
}

void RegistrationGate::End(double admitted) {
  const double now = now_();
  const double took = std::clamp(now - admitted, 1e-4, 10.0);
  {
    // The activity first, then the count: QuietSince never sees nothing in flight with an older
    // activity than this registration's end.
    std::lock_guard<std::mutex> lock(mu_);
    mean_seconds_ = 0.9 * mean_seconds_ + 0.1 * took;
    last_activity_ = std::max(last_activity_, now);
  }
  --in_flight_;
}

double RegistrationGate::Rate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kMaxInFlight / mean_seconds_;
}

double RegistrationGate::Backlog() const {
  const double now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(0.0, next_slot_ - now);
}

// Slots one registration's time apart at the gate's pace; the agent comes back somewhere inside its
// slot (jitter), and never sooner than kMinRetrySeconds.
double RegistrationGate::NextSlot() {
  const double now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  const double spacing = mean_seconds_ / kMaxInFlight;
  const double slot = std::max(next_slot_, now + kMinRetrySeconds);
  if (slot - now > kMaxRetrySeconds) {  // past the cap: not a slot, a spread wait at the cap
    std::uniform_real_distribution<double> spread(0.5, 1.0);
    return kMaxRetrySeconds * spread(rng_);
  }
  next_slot_ = slot + spacing;
  std::uniform_real_distribution<double> within(0, spacing);
  return slot - now + within(rng_);
}

void RegistrationGate::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  opened_at_ = now_();
}

double RegistrationGate::OpenedAt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return opened_at_;
}

double RegistrationGate::QuietSince() const {
  const double now = now_();
  if (in_flight_.load() > 0) return now;
  std::lock_guard<std::mutex> lock(mu_);
  return std::max({opened_at_, last_activity_, latest_due_});
}

int RegistrationGate::ShortRetryMs() {
  std::lock_guard<std::mutex> lock(mu_);
  std::uniform_real_distribution<double> wait(kMinRetrySeconds, 2 * kMinRetrySeconds);
  return static_cast<int>(std::lround(wait(rng_) * 1000));
}

bool RegistrationGate::Reserve(const std::string& name, size_t devices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!names_.emplace(name, devices).second) return false;
  devices_ += devices;
  return true;
}

void RegistrationGate::Release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return;
  devices_ -= it->second;
  names_.erase(it);
}

size_t RegistrationGate::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

}  // namespace moe::controller
