// The caching allocator's stream rule (kernels/tensor.h), on a fake device whose streams and events
// are counters: a block freed while another stream may still use it is not handed out again until
// the event recorded on that stream at the free has completed. Without the rule, the next
// allocation of that size gets the block at once (the first test below fails).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "kernels/tensor.h"

namespace moe {
namespace {

// Streams are ints; an event is "done" once the test completes the stream's work up to it.
class FakeStreamAllocator final : public CachingAllocator {
 public:
  struct Event {
    int stream;
    int position;  // work queued on the stream when recorded
  };
  std::map<int, int> queued, completed;  // per stream
  std::vector<Event*> live_events;
  int waits = 0;

  ~FakeStreamAllocator() override { EmptyCache(); }  // LeakSanitizer: the blocks go back to malloc
  void Queue(int stream) { ++queued[stream]; }
  void Complete(int stream) { completed[stream] = queued[stream]; }
  static StreamHandle S(int stream) {
    return reinterpret_cast<StreamHandle>(static_cast<intptr_t>(stream));
  }
  void Memset(void* ptr, int value, size_t bytes) override { std::memset(ptr, value, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyWithin(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }

 protected:
  void* RawAllocate(size_t bytes) override { return std::malloc(bytes); }
  void RawFree(void* ptr) override { std::free(ptr); }
  size_t Granularity() const override { return 64; }
  EventHandle RecordEvent(StreamHandle stream) override {
    const int s = static_cast<int>(reinterpret_cast<intptr_t>(stream));
    live_events.push_back(new Event{s, queued[s]});
    return live_events.back();
  }
  bool EventDone(EventHandle event) override {
    const auto* e = static_cast<Event*>(event);
    return completed[e->stream] >= e->position;
  }
  void WaitEvent(EventHandle event) override {
    ++waits;
    Complete(static_cast<Event*>(event)->stream);
  }
  void DestroyEvent(EventHandle event) override {
    std::erase(live_events, static_cast<Event*>(event));
    delete static_cast<Event*>(event);
  }
};

TEST(CachingAllocator, ABlockAnotherStreamUsesIsReusedOnlyAfterThatStreamsEvent) {
  FakeStreamAllocator a;
  void* p = a.Allocate(1000);
  a.RecordStream(p, FakeStreamAllocator::S(7));  // an all-to-all on stream 7 reads it
  a.Queue(7);
  a.Free(p, 1000);  // freed on the default stream meanwhile
  EXPECT_EQ(a.PendingBlocks(), 1u);
  void* q = a.Allocate(1000);
  EXPECT_NE(q, p) << "the block went to a new tensor while stream 7 may still use it";
  a.Complete(7);
  void* r = a.Allocate(1000);
  EXPECT_EQ(r, p) << "once stream 7 passed the event, the block is reused";
  EXPECT_EQ(a.PendingBlocks(), 0u);
  EXPECT_TRUE(a.live_events.empty()) << "events are destroyed once passed";
  a.Free(q, 1000);
  a.Free(r, 1000);
}

TEST(CachingAllocator, ABlockUsedOnlyOnTheDefaultStreamIsReusedAtOnce) {
  FakeStreamAllocator a;
  void* p = a.Allocate(1000);
  a.Free(p, 1000);
  EXPECT_EQ(a.PendingBlocks(), 0u);
  EXPECT_EQ(a.Allocate(1000), p);
  a.Free(p, 1000);
}

TEST(CachingAllocator, EveryRecordedStreamMustPassItsEvent) {
  FakeStreamAllocator a;
  void* p = a.Allocate(4096);
  a.RecordStream(p, FakeStreamAllocator::S(1));
  a.RecordStream(p, FakeStreamAllocator::S(2));
  a.RecordStream(p, FakeStreamAllocator::S(2));  // twice: one event
  a.Queue(1);
  a.Queue(2);
  a.Free(p, 4096);
  EXPECT_EQ(a.live_events.size(), 2u);
  a.Complete(1);
  void* q = a.Allocate(4096);
  EXPECT_NE(q, p) << "stream 2 has not passed its event";
  a.Complete(2);
  void* r = a.Allocate(4096);
  EXPECT_EQ(r, p);
  a.Free(q, 4096);
  a.Free(r, 4096);
}

TEST(CachingAllocator, RecordStreamNeedsALiveBlock) {
  FakeStreamAllocator a;
  void* p = a.Allocate(64);
  a.Free(p, 64);
  EXPECT_DEATH(a.RecordStream(p, FakeStreamAllocator::S(3)), "not live");
}

}  // namespace
}  // namespace moe
