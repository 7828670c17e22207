// How the host waits for an operation on a non-blocking NCCL communicator (config.blocking = 0),
// kept apart from NCCL and CUDA so that the logic is tested on any machine (tests/engine/
// nccl_wait_test.cc); nccl_comm.cc supplies the real calls.
//
// A call on a non-blocking communicator may return ncclInProgress: the operation is not yet on the
// stream. Until ncclCommGetAsyncError stops reporting ncclInProgress the stream says nothing (it
// reads idle before the kernel is enqueued), so reading the result or freeing the buffers then is
// wrong. NCCL's rule: poll the communicator until it leaves ncclInProgress, and only then touch the
// stream.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::parallel {

// One look at something being waited for.
struct NcclPoll {
  enum State { kDone, kPending, kFailed } state = kDone;
  std::string error;  // kFailed: what went wrong, in the library's words
};

struct NcclWaitHooks {
  // ncclCommGetAsyncError: kPending while ncclInProgress, kDone on ncclSuccess, else kFailed.
  std::function<NcclPoll()> comm_state;
  // cudaStreamQuery on the communicator's stream: kPending while cudaErrorNotReady. Empty when the
  // operation has no stream work (communicator creation).
  std::function<NcclPoll()> stream_state;
  // ncclCommAbort: called once on a failure or timeout (the communicator is unusable afterwards).
  std::function<void()> abort;
  // The clock and the pause between polls (injected: tests run a fake clock).
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<void(std::chrono::microseconds)> sleep;
};

// Waits until the operation is complete: first until the communicator leaves ncclInProgress, then
// until its stream is idle, watching for asynchronous errors all along. A communicator error aborts
// it (UNAVAILABLE: a peer failed); so does `timeout` passing (DEADLINE_EXCEEDED); a stream error is
// INTERNAL. Errors start with `where` ("step 3: all_reduce over nccl (rank 1 of a group of 8)").
Status WaitForNccl(const NcclWaitHooks& hooks, std::chrono::milliseconds timeout,
                   const std::string& where);

// The watch over stream-ordered collectives. The host does not wait for a device collective (the
// kernels' stream waits for its end event), so nothing would notice one that hangs or fails: this
// is PyTorch's NCCL watchdog. Each collective is watched from its issue until its end event has
// passed on the device. Its timeout runs from its start event (recorded on the communicator's
// stream after the kernels it waits for), so the rank's own queued compute never counts against it.
// Poll fails, naming the collective and what the rank was doing, past the timeout, when its
// communicator reports an asynchronous error, or on a device error (the caller ends the rank: work
// queued behind a failed collective cannot be trusted). Not thread-safe: its owner locks.
class CollectiveWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    std::function<NcclPoll(void* event)>
        event_state;  // cudaEventQuery: kPending while cudaErrorNotReady
    std::function<void(void* event)> destroy_event;  // cudaEventDestroy
    std::function<NcclPoll(void* comm)>
        comm_state;  // ncclCommGetAsyncError (kPending: ncclInProgress)
    std::function<Clock::time_point()> now;
  };
  explicit CollectiveWatch(Hooks hooks) : hooks_(std::move(hooks)) {}
  ~CollectiveWatch();

  // Watches the collective of `comm` that starts with `start` and ends with `end` (the watch
  // destroys both events).
  void Add(void* comm, void* start, void* end, std::chrono::milliseconds timeout,
           std::string where);
  // Stops watching the collectives of a communicator that is going away (destroys their events).
  void Forget(void* comm);
  // Drops the collectives that have ended; the first failure, else OK (the failed one stays
  // watched).
  Status Poll();
  size_t watched() const { return entries_.size(); }

 private:
  struct Entry {
    void* comm;
    void* start;  // null once it has passed (destroyed)
    void* end;
    std::optional<Clock::time_point> started;
    std::chrono::milliseconds timeout;
    std::string where;
  };
  // The entry's state: done (drop it), pending, or failed (*failure set).
  bool Check(Entry& e, Clock::time_point now, Status* failure);
  void Destroy(const Entry& e);
  Hooks hooks_;
  std::vector<Entry> entries_;
};

// How the device orders the kernels of this process's communicators (NCCL user guide, "Using
// multiple NCCL communicators concurrently"): kernels of two communicators running at once on one
// device can deadlock unless every rank issues their operations in the same order and the device
// launches them in that order.
//   kImplicit: NCCL 2.26 and later follow the host's issue order across communicators when
//     NCCL_LAUNCH_ORDER_IMPLICIT=1 (which the caller sets before NCCL reads its environment);
//   kSharedStream: an older NCCL, or NCCL_LAUNCH_ORDER_IMPLICIT=0 set by the user: every
//     communicator of the process puts its operations on one stream, which orders them.
// `version` is ncclGetVersion's (2.26.0 = 22600); `env` NCCL_LAUNCH_ORDER_IMPLICIT's value or null.
enum class NcclLaunchOrder { kImplicit, kSharedStream };
NcclLaunchOrder ChooseNcclLaunchOrder(int version, const char* env);
const char* NcclLaunchOrderName(NcclLaunchOrder order);

}  // namespace moe::parallel
