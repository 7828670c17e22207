// How the host waits for an operation on a non-blocking NCCL communicator (config.blocking = 0),
// kept apart from NCCL and CUDA so that the logic is tested on any machine (tests/engine/
// nccl_wait_test.cc); nccl_comm.cc supplies the real calls.
//
// A call on a non-blocking communicator may return ncclInProgress: the operation is not yet on the
// stream. Until ncclCommGetAsyncError stops reporting ncclInProgress the stream says nothing (it reads
// idle before the kernel is enqueued), so reading the result or freeing the buffers then is wrong.
// NCCL's rule: poll the communicator until it leaves ncclInProgress, and only then touch the stream.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"

namespace moe {

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
Status WaitForNccl(const NcclWaitHooks& hooks, std::chrono::milliseconds timeout, const std::string& where);

}  // namespace moe
