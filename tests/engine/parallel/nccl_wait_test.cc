// WaitForNccl, the wait every NCCL operation goes through, against a fake non-blocking communicator
// on a fake clock (no GPU, no NCCL): the fake reports ncclInProgress for a while, during which the
// operation is not on the stream yet, so the stream reads idle. A wait that trusts the stream then
// returns before the operation even ran; the right one waits for the communicator first. And
// CollectiveWatch, the watchdog of the stream-ordered collectives, on fake events, communicators
// and clock.
#include "worker/engine/parallel/nccl_wait.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace moe::parallel {
namespace {

using std::chrono::milliseconds;

// A communicator whose operation is enqueued after `issuing_polls` polls of its state, then runs on
// the stream for `running_polls` polls of the stream. Everything it was asked is counted.
struct FakeNccl {
  int issuing_polls = 0;
  int running_polls = 0;
  int fail_at_comm_poll = -1;  // the communicator reports an error at this poll (-1: never)
  bool stream_error = false;

  int comm_polls = 0, stream_polls = 0, aborts = 0;
  int stream_polls_before_enqueue = 0;
  bool enqueued = false, finished = false;
  std::chrono::steady_clock::time_point now{};

  NcclWaitHooks Hooks(bool with_stream = true) {
    NcclWaitHooks h;
    h.comm_state = [this]() -> NcclPoll {
      if (comm_polls++ == fail_at_comm_poll)
        return {NcclPoll::kFailed, "remote process exited or there was a network error"};
      if (comm_polls <= issuing_polls) return {NcclPoll::kPending, ""};
      enqueued = true;
      return {};
    };
    if (with_stream) {
      h.stream_state = [this]() -> NcclPoll {
        if (!enqueued) {
          ++stream_polls_before_enqueue;
          return {};  // nothing on the stream yet: it reads idle
        }
        if (stream_error) return {NcclPoll::kFailed, "cudaErrorIllegalAddress"};
        if (++stream_polls <= running_polls) return {NcclPoll::kPending, ""};
        finished = true;
        return {};
      };
    }
    h.abort = [this] { ++aborts; };
    h.now = [this] { return now; };
    h.sleep = [this](std::chrono::microseconds d) { now += d; };
    return h;
  }
};

const char* kWhere = "step 4: all_reduce over nccl (rank 1 of a group of 8)";

TEST(WaitForNccl, WaitsForTheCommunicatorToLeaveInProgressBeforeTrustingTheStream) {
  FakeNccl f;
  f.issuing_polls = 20;
  f.running_polls = 5;
  Status st = WaitForNccl(f.Hooks(), milliseconds(1000), kWhere);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(f.finished)
      << "the wait returned before the operation ran (it trusted an idle stream while "
         "the communicator was still ncclInProgress)";
  EXPECT_EQ(f.stream_polls_before_enqueue, 0)
      << "the stream was queried while the operation was not on it";
  EXPECT_GE(f.comm_polls, 21);
  EXPECT_EQ(f.aborts, 0);
}

TEST(WaitForNccl, AnOperationIssuedAtOnceWaitsForTheStreamOnly) {
  FakeNccl f;
  f.running_polls = 3;
  ASSERT_TRUE(WaitForNccl(f.Hooks(), milliseconds(1000), kWhere).ok());
  EXPECT_TRUE(f.finished);
  EXPECT_EQ(f.stream_polls, 4);
}

TEST(WaitForNccl, AnErrorWhileInProgressOrOnTheStreamAbortsAndSaysAPeerFailed) {
  for (const bool on_stream : {false, true}) {
    FakeNccl f;
    f.issuing_polls = on_stream ? 0 : 100;
    f.running_polls = on_stream ? 1000000 : 0;
    f.fail_at_comm_poll = on_stream ? 50 : 7;
    Status st = WaitForNccl(f.Hooks(), milliseconds(1000), kWhere);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find(std::string(kWhere) + ": a peer failed: remote process exited"),
              std::string::npos)
        << st;
    EXPECT_EQ(f.aborts, 1) << "on the stream: " << on_stream;
    EXPECT_EQ(f.stream_polls_before_enqueue, 0);
  }
}

TEST(WaitForNccl, StuckInProgressTimesOutAndAborts) {
  FakeNccl f;
  f.issuing_polls = 1 << 30;
  Status st = WaitForNccl(f.Hooks(), milliseconds(2500), kWhere);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("timed out after 2.5 s"), std::string::npos) << st;
  EXPECT_NE(st.message().find("ncclInProgress"), std::string::npos) << st;
  EXPECT_EQ(f.aborts, 1);
  EXPECT_GE(f.now - std::chrono::steady_clock::time_point{}, milliseconds(2500));
  EXPECT_LT(f.now - std::chrono::steady_clock::time_point{}, milliseconds(2600));
  EXPECT_EQ(f.stream_polls_before_enqueue, 0);
}

TEST(WaitForNccl, AStreamThatNeverFinishesTimesOutAndAborts) {
  FakeNccl f;
  f.issuing_polls = 3;
  f.running_polls = 1 << 30;
  Status st = WaitForNccl(f.Hooks(), milliseconds(1000), kWhere);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("with the operation on the stream"), std::string::npos) << st;
  EXPECT_EQ(f.aborts, 1);
}

TEST(WaitForNccl, AStreamErrorIsInternalAndDoesNotAbort) {
  FakeNccl f;
  f.stream_error = true;
  Status st = WaitForNccl(f.Hooks(), milliseconds(1000), kWhere);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("cuda: cudaErrorIllegalAddress"), std::string::npos) << st;
  EXPECT_EQ(f.aborts, 0);
}

TEST(WaitForNccl, WithoutAStreamCreationIsDoneWhenTheCommunicatorIs) {
  FakeNccl f;
  f.issuing_polls = 12;
  ASSERT_TRUE(WaitForNccl(f.Hooks(/*with_stream=*/false), milliseconds(1000), kWhere).ok());
  EXPECT_EQ(f.comm_polls, 13);
}

// ---- CollectiveWatch: the watchdog of stream-ordered collectives ----

// Fake events (ints: done, pending or failed), communicators (their async state) and a clock; every
// event the watch destroys is recorded, so a leak or a double destroy shows.
struct FakeDevice {
  std::map<int, NcclPoll::State> events;  // event -> has the device passed it
  std::map<int, NcclPoll> comm;           // communicator -> its state
  std::vector<int> destroyed;
  std::chrono::steady_clock::time_point now{};

  static void* P(int i) { return reinterpret_cast<void*>(static_cast<intptr_t>(i)); }
  static int I(void* p) { return static_cast<int>(reinterpret_cast<intptr_t>(p)); }
  CollectiveWatch::Hooks Hooks() {
    CollectiveWatch::Hooks h;
    h.event_state = [this](void* e) -> NcclPoll {
      const NcclPoll::State s = events.at(I(e));
      return {s, s == NcclPoll::kFailed ? "cudaErrorIllegalAddress" : ""};
    };
    h.destroy_event = [this](void* e) { destroyed.push_back(I(e)); };
    h.comm_state = [this](void* c) { return comm.count(I(c)) ? comm.at(I(c)) : NcclPoll{}; };
    h.now = [this] { return now; };
    return h;
  }
  // A collective of communicator `c` with start event 10 * id and end event 10 * id + 1, both
  // pending.
  void Add(CollectiveWatch& w, int c, int id, milliseconds timeout, const std::string& where) {
    events[10 * id] = events[10 * id + 1] = NcclPoll::kPending;
    w.Add(P(c), P(10 * id), P(10 * id + 1), timeout, where);
  }
};

TEST(CollectiveWatch, DropsCollectivesOnceTheirEndEventsPassAndDestroysEachEventOnce) {
  FakeDevice d;
  CollectiveWatch w(d.Hooks());
  d.Add(w, 100, 1, milliseconds(5000), "a");
  d.Add(w, 100, 2, milliseconds(5000), "b");
  d.Add(w, 200, 3, milliseconds(5000), "c");
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(w.watched(), 3u);
  d.events[20] = NcclPoll::kDone;
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(d.destroyed, std::vector<int>({20})) << "a start that passed is destroyed at once";
  d.events[21] = NcclPoll::kDone;
  ASSERT_TRUE(w.Poll().ok());
  EXPECT_EQ(w.watched(), 2u);
  EXPECT_EQ(d.destroyed, std::vector<int>({20, 21}));
  w.Forget(FakeDevice::P(100));  // communicator 100 goes away: its collective's events with it
  EXPECT_EQ(w.watched(), 1u);
  EXPECT_EQ(d.destroyed, std::vector<int>({20, 21, 10, 11}));
  {
    CollectiveWatch other(d.Hooks());
    d.Add(other, 300, 4, milliseconds(10), "d");
  }
  EXPECT_EQ(d.destroyed, std::vector<int>({20, 21, 10, 11, 40, 41}))
      << "the watch destroys what it holds when it ends";
}

TEST(CollectiveWatch, TheTimeoutRunsFromTheStartNotWhileTheRanksOwnComputeIsQueuedAhead) {
  FakeDevice d;
  CollectiveWatch w(d.Hooks());
  d.Add(w, 100, 1, milliseconds(3000),
        "step 4: gradient span 2: reduce_scatter over nccl (rank 0 of a group of 2)");
  d.now += milliseconds(60000);  // a minute of this rank's backward queued before it
  ASSERT_TRUE(w.Poll().ok()) << "not started: no timeout yet";
  d.events[10] = NcclPoll::kDone;
  ASSERT_TRUE(w.Poll().ok());
  d.now += milliseconds(2999);
  ASSERT_TRUE(w.Poll().ok());
  d.now += milliseconds(2);
  const Status st = w.Poll();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("step 4: gradient span 2: reduce_scatter over nccl"),
            std::string::npos)
      << st;
  EXPECT_NE(st.message().find("timed out after 3 s"), std::string::npos) << st;
  EXPECT_EQ(w.watched(), 1u) << "the failed one stays watched";
}

TEST(CollectiveWatch, AnAsynchronousErrorFailsAtOnceSayingAPeerFailed) {
  FakeDevice d;
  CollectiveWatch w(d.Hooks());
  d.Add(w, 100, 1, milliseconds(60000), "gradient reduce_scatter over nccl");
  d.Add(w, 200, 2, milliseconds(60000), "all_gather over nccl");
  ASSERT_TRUE(w.Poll().ok());
  d.comm[200] = {NcclPoll::kFailed, "remote process exited or there was a network error"};
  const Status st = w.Poll();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("all_gather over nccl: a peer failed: remote process exited"),
            std::string::npos)
      << st;
  d.comm[200] = {NcclPoll::kPending, ""};  // ncclInProgress is not an error
  EXPECT_TRUE(w.Poll().ok());
}

TEST(CollectiveWatch, ADeviceErrorIsInternalAtOnceNotATimeoutLater) {
  FakeDevice d;
  CollectiveWatch w(d.Hooks());
  d.Add(w, 100, 1, milliseconds(60000), "all_to_all_v over nccl");
  d.Add(w, 100, 2, milliseconds(60000), "later");
  d.events[10] = NcclPoll::kDone;
  d.events[11] = NcclPoll::kFailed;  // a kernel before it faulted: the stream is broken
  const Status st = w.Poll();
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_NE(st.message().find("all_to_all_v over nccl: cuda: cudaErrorIllegalAddress"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace moe::parallel
