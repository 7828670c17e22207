// One fake agent's stream to the controller on gRPC's callback API (fake_fleet.h): gRPC's threads
// read it (each message handed to the fleet) and write what Send queued, one write at a time.
// Once gRPC is done with it, it tells the fleet how the stream ended and the fleet owns it: the
// fleet deletes it on a thread of its own, never on gRPC's (see FakeSessionOwner::OnEnded).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "common/grpc_client.h"
#include "moe/v1/worker_service.grpc.pb.h"

namespace moe::worker {

class FakeSession;

// Who hears what comes on the sessions (the fleet): called on gRPC's threads.
class FakeSessionOwner {
 public:
  virtual ~FakeSessionOwner() = default;
  virtual void OnMessage(int agent, FakeSession* s, const moe::v1::ControllerMessage& m) = 0;
  // The stream ended (`answered`: the controller said something on it first); `unsent`: what was
  // queued on it and never written (a rank's outcome among them goes with the next registration).
  // Called last: gRPC is done with `s`, and the owner deletes it, on a thread that is not gRPC's.
  // The session's context may hold the last reference to its channel, and once the process's last
  // channel that made callback calls is gone, gRPC 1.51 tears down their completion queue; on one
  // of that queue's own threads it then frees the queue twice (an ASan double free, or an abort on
  // "prior > 0"). Deleted on gRPC's thread, a session whose agent had dropped its channel (a
  // controller it could not reach) brought that down.
  virtual void OnEnded(int agent, FakeSession* s, const grpc::Status& st, bool answered,
                       std::vector<moe::v1::WorkerMessage> unsent) = 0;
};

class FakeSession final
    : public grpc::ClientBidiReactor<moe::v1::WorkerMessage, moe::v1::ControllerMessage> {
 public:
  // The registration is its first message: what Send queues before Start goes after it.
  FakeSession(FakeSessionOwner* fleet, int agent, moe::v1::WorkerMessage registration)
      : fleet_(fleet), agent_(agent), current_(std::move(registration)), writing_(true) {}
  // Opens the stream.
  void Start(moe::v1::WorkerService::Stub& stub, const ClientOptions& client);
  // Queues a message; false once the stream is ending (nothing was queued).
  bool Send(const moe::v1::WorkerMessage& m);
  // Messages not written yet (Leave waits for none).
  size_t Pending();
  // Ends the stream (Stop); OnDone follows.
  void Cancel() { ctx_.TryCancel(); }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& st) override;

 private:
  // With mu_ held: no more writes. True when the caller, once it released mu_, removes the hold
  // (none is under way): OnDone may follow at once, so nothing of this is touched after it.
  bool Closing();

  FakeSessionOwner* const fleet_;
  const int agent_;
  grpc::ClientContext ctx_;
  moe::v1::ControllerMessage in_;
  std::mutex mu_;
  moe::v1::WorkerMessage current_;  // the write under way (writing_)
  std::deque<moe::v1::WorkerMessage> out_;
  std::vector<moe::v1::WorkerMessage> unsent_;  // queued when the stream ended (OnEnded's)
  bool writing_, closing_ = false, held_ = false;
  bool answered_ = false;  // a message came from the controller
};

}  // namespace moe::worker
