#include "worker/engine/parallel/nccl_wait.h"

#include <cstring>

namespace moe::parallel {
namespace {

constexpr std::chrono::microseconds kPollInterval(50);

std::string Seconds(std::chrono::milliseconds t) {
  return std::to_string(t.count() / 1000) +
         (t.count() % 1000 ? "." + std::to_string(t.count() % 1000 / 100) : "") + " s";
}

}  // namespace

Status WaitForNccl(const NcclWaitHooks& hooks, std::chrono::milliseconds timeout,
                   const std::string& where) {
  const auto start = hooks.now();
  bool issued = false;  // the communicator has left ncclInProgress: the work is on the stream
  while (true) {
    const NcclPoll comm = hooks.comm_state();
    if (comm.state == NcclPoll::kFailed) {
      hooks.abort();
      return UnavailableError(where + ": a peer failed: " + comm.error +
                              "; the communicator was aborted");
    }
    issued = issued || comm.state == NcclPoll::kDone;
    if (issued) {
      const NcclPoll stream = hooks.stream_state ? hooks.stream_state() : NcclPoll{};
      if (stream.state == NcclPoll::kDone) return OkStatus();
      if (stream.state == NcclPoll::kFailed)
        return InternalError(where + ": cuda: " + stream.error);
    }
    if (hooks.now() - start > timeout) {
      hooks.abort();
      return DeadlineExceededError(
          where + ": timed out after " + Seconds(timeout) + " waiting for a peer (a rank hangs " +
          "or died) " +
          (issued ? "with the operation on the stream"
                  : "while NCCL was still issuing the operation (ncclInProgress)") +
          "; the communicator was aborted");
    }
    hooks.sleep(kPollInterval);
  }
}

CollectiveWatch::~CollectiveWatch() {
  for (const Entry& e : entries_) Destroy(e);
}

void CollectiveWatch::Destroy(const Entry& e) {
  if (e.start != nullptr) hooks_.destroy_event(e.start);
  hooks_.destroy_event(e.end);
}

void CollectiveWatch::Add(void* comm, void* start, void* end, std::chrono::milliseconds timeout,
                          std::string where) {
  entries_.push_back({comm, start, end, std::nullopt, timeout, std::move(where)});
}

void CollectiveWatch::Forget(void* comm) {
  std::erase_if(entries_, [&](const Entry& e) {
    if (e.comm != comm) return false;
    Destroy(e);
    return true;
  });
}

bool CollectiveWatch::Check(Entry& e, Clock::time_point now, Status* failure) {
  const NcclPoll end = hooks_.event_state(e.end);
  if (end.state == NcclPoll::kDone) return true;
  if (!failure->ok()) return false;  // the first failure is the one reported
  if (end.state == NcclPoll::kFailed) {
    *failure = InternalError(e.where + ": cuda: " + end.error);
    return false;
  }
  if (e.start != nullptr) {  // not started until the kernels before it are done
    const NcclPoll start = hooks_.event_state(e.start);
    if (start.state == NcclPoll::kFailed) {
      *failure = InternalError(e.where + ": cuda: " + start.error);
      return false;
    }
    if (start.state == NcclPoll::kDone) {
      hooks_.destroy_event(e.start);
      e.start = nullptr;
      e.started = now;
    }
  }
  const NcclPoll comm = hooks_.comm_state(e.comm);
  if (comm.state == NcclPoll::kFailed) {
    *failure = UnavailableError(e.where + ": a peer failed: " + comm.error);
  } else if (e.started && now - *e.started > e.timeout) {
    *failure = DeadlineExceededError(
        e.where + ": timed out after " + Seconds(e.timeout) +
        " waiting for a peer (a rank hangs or died) with the operation on the stream");
  }
  return false;
}

Status CollectiveWatch::Poll() {
  const auto now = hooks_.now();
  Status failure;
  std::erase_if(entries_, [&](Entry& e) {
    if (!Check(e, now, &failure)) return false;
    Destroy(e);
    return true;
  });
  return failure;
}

NcclLaunchOrder ChooseNcclLaunchOrder(int version, const char* env) {
  constexpr int kImplicitSince = 22600;  // NCCL 2.26.0
  if (version < kImplicitSince) return NcclLaunchOrder::kSharedStream;
  if (env != nullptr && std::strcmp(env, "0") == 0) return NcclLaunchOrder::kSharedStream;
  return NcclLaunchOrder::kImplicit;
}

const char* NcclLaunchOrderName(NcclLaunchOrder order) {
  return order == NcclLaunchOrder::kImplicit ? "NCCL_LAUNCH_ORDER_IMPLICIT=1"
                                             : "one stream shared by the communicators";
}

}  // namespace moe::parallel
