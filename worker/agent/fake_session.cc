// A fake agent's stream (fake_session.h). The session holds a hold of its own (AddHold) while it
// may still write: Send is called from the fleet's timer thread and gRPC's, outside any reaction,
// and gRPC must not finish the call (OnDone) while a write could still start. The hold goes when
// the stream is ending (a read or write failed) and no write is under way.
#include "worker/agent/fake_session.h"

namespace moe::worker {

void FakeSession::Start(moe::v1::WorkerService::Stub& stub, const ClientOptions& client) {
  PrepareContext(&ctx_, client, 0);  // the stream lives as long as the agent
  stub.async()->Connect(&ctx_, this);
  {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  AddHold();
  StartWrite(&current_);
  StartRead(&in_);
  StartCall();
}

bool FakeSession::Send(const moe::v1::WorkerMessage& m) {
  std::unique_lock lock(mu_);
  if (closing_) return false;
  if (writing_) {
    out_.push_back(m);
    return true;
  }
  writing_ = true;
  current_ = m;
  lock.unlock();
  StartWrite(&current_);
  return true;
}

size_t FakeSession::Pending() {
  std::lock_guard lock(mu_);
  return out_.size() + (writing_ ? 1 : 0);
}

void FakeSession::OnWriteDone(bool ok) {
  std::unique_lock lock(mu_);
  if (!ok) {
    closing_ = true;
    unsent_.push_back(std::move(current_));  // never written
  }
  if (closing_ || out_.empty()) {
    writing_ = false;
    const bool release = closing_ && Closing();
    lock.unlock();
    if (release) RemoveHold();
    return;
  }
  current_ = std::move(out_.front());
  out_.pop_front();
  lock.unlock();
  StartWrite(&current_);
}

void FakeSession::OnReadDone(bool ok) {
  if (!ok) {
    std::unique_lock lock(mu_);
    closing_ = true;
    const bool release = !writing_ && Closing();
    lock.unlock();
    if (release) RemoveHold();
    return;
  }
  {
    std::lock_guard lock(mu_);
    answered_ = true;
  }
  fleet_->OnMessage(agent_, this, in_);
  StartRead(&in_);
}

bool FakeSession::Closing() {
  for (auto& m : out_) unsent_.push_back(std::move(m));
  out_.clear();
  const bool release = held_;
  held_ = false;
  return release;
}

void FakeSession::OnDone(const grpc::Status& st) {
  bool answered = false;
  std::vector<moe::v1::WorkerMessage> unsent;
  {
    std::lock_guard lock(mu_);
    answered = answered_;
    for (auto& m : out_) unsent_.push_back(std::move(m));  // a cancel before any read ended
    out_.clear();
    unsent.swap(unsent_);
  }
  fleet_->OnEnded(agent_, this, st, answered, std::move(unsent));  // last: the fleet owns it now
}

}  // namespace moe::worker
