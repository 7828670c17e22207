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

StatusOr<double> RegistrationGate::Begin(const std::string& agent) {
  const double now = now_();
  if (++in_flight_ <= kMaxInFlight) {
    std::lock_guard<std::mutex> lock(mu_);
    last_activity_ = std::max(last_activity_, now);
    if (!agent.empty()) due_.erase(agent);  // it came back
    return now;
  }
  --in_flight_;
  ++refused_;
  const double wait = NextSlot();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_activity_ = std::max(last_activity_, now);
    if (!agent.empty()) RememberRefused(agent, now + wait);
  }
  const int ms = static_cast<int>(std::lround(wait * 1000));
  return UnavailableError("register: the controller is admitting " + std::to_string(kMaxInFlight) +
                          " registrations at once (about " +
                          std::to_string(static_cast<int>(Rate())) + " a second); retry after " +
                          std::to_string(ms) + " ms");
}

void RegistrationGate::End(double admitted) {
  --in_flight_;
  const double now = now_();
  const double took = std::clamp(now - admitted, 1e-4, 10.0);
  std::lock_guard<std::mutex> lock(mu_);
  mean_seconds_ = 0.9 * mean_seconds_ + 0.1 * took;
  last_activity_ = std::max(last_activity_, now);
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

void RegistrationGate::RememberRefused(const std::string& agent, double due) {
  if (due_.size() >= kMaxRemembered && due_.find(agent) == due_.end()) {
    // Full: forget the agents that were due longest ago (past any grace a caller gives them).
    const double now = now_();
    std::erase_if(due_, [now](const auto& kv) { return kv.second + kMaxRetrySeconds < now; });
    if (due_.size() >= kMaxRemembered) return;
  }
  due_[agent] = due;
}

void RegistrationGate::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  opened_at_ = now_();
}

double RegistrationGate::QuietSince() const {
  const double now = now_();
  if (in_flight_.load() > 0) return now;
  std::lock_guard<std::mutex> lock(mu_);
  return std::max({opened_at_, last_activity_, next_slot_});
}

bool RegistrationGate::Expected(const std::string& agent, double grace) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = due_.find(agent);
  return it != due_.end() && it->second + grace > now_();
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
