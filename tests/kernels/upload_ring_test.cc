// The upload ring (kernels/upload_ring.h) on a fake stream: a queued copy reads the ring only when
// the fake stream runs it, as a DMA engine would, so a ring that handed out a region whose copy had
// not run yet would deliver the later upload's bytes to the earlier destination. The tests check
// every destination's bytes after the stream has run, and that the host waited exactly when it had
// to.
#include "kernels/upload_ring.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "common/rng.h"
#include "kernels/runtime.h"

namespace moe::kernels {
namespace {

class FakeStream {
 public:
  struct Copy {
    void* dst;
    const void* staged;
    size_t bytes;
  };
  struct Event {
    int64_t position;
  };

  UploadRing::Hooks Hooks() {
    UploadRing::Hooks h;
    h.alloc_pinned = [this](size_t n) -> void* {
      ++pinned_allocs;
      return refuse_pinned ? nullptr : std::malloc(n);
    };
    h.free_pinned = [](void* p) { std::free(p); };
    h.copy_async = [this](void* dst, const void* staged, size_t bytes) {
      queue.push_back({dst, staged, bytes});
    };
    h.record_event = [this]() -> UploadRing::Event {
      return new Event{done + static_cast<int64_t>(queue.size())};
    };
    h.event_done = [this](UploadRing::Event e) { return static_cast<Event*>(e)->position <= done; };
    h.wait_event = [this](UploadRing::Event e) {
      ++host_waits;
      RunUntil(static_cast<Event*>(e)->position);
    };
    h.destroy_event = [](UploadRing::Event e) { delete static_cast<Event*>(e); };
    return h;
  }
  // Runs queued copies until `position` copies have run in all.
  void RunUntil(int64_t position) {
    while (done < position && !queue.empty()) {
      const Copy c = queue.front();
      queue.pop_front();
      std::memcpy(c.dst, c.staged, c.bytes);  // reads the ring now, not at the upload
      ++done;
    }
  }
  void RunAll() { RunUntil(done + static_cast<int64_t>(queue.size())); }

  std::deque<Copy> queue;
  int64_t done = 0;
  int host_waits = 0, pinned_allocs = 0;
  bool refuse_pinned = false;
};

std::vector<char> Bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng.Uniform() * 256);
  return v;
}

TEST(UploadRing, ManyUploadsOfRandomSizesArriveIntactWhileTheStreamLags) {
  FakeStream stream;
  const int64_t syncs_before = HostSyncs();
  UploadRing ring(4096, stream.Hooks());
  Rng rng(7);
  std::vector<std::vector<char>> sources, dests;
  for (int i = 0; i < 400; ++i) {
    const size_t n = 1 + static_cast<size_t>(rng.Uniform() * 1500);
    sources.push_back(Bytes(n, 100 + static_cast<uint64_t>(i)));
    dests.emplace_back(n, 0);
    std::vector<char> scratch = sources.back();  // the caller's buffer: overwritten right after
    ASSERT_TRUE(ring.Upload(dests.back().data(), scratch.data(), n));
    std::memset(scratch.data(), 0x5A, n);
    if (rng.Uniform() < 0.3) stream.RunUntil(stream.done + 1);  // the stream lags behind the host
  }
  stream.RunAll();
  for (size_t i = 0; i < sources.size(); ++i) ASSERT_EQ(dests[i], sources[i]) << "upload " << i;
  EXPECT_EQ(ring.uploads(), 400);
  EXPECT_GT(ring.waits(),
            0);  // 400 uploads of ~750 bytes through 4 KiB: the ring wrapped onto queued copies
  EXPECT_GE(stream.host_waits, ring.waits());  // one reservation may wait for several regions
  EXPECT_EQ(HostSyncs() - syncs_before, ring.waits());  // each wait counts as one host sync
  EXPECT_EQ(stream.pinned_allocs, 1);
}

TEST(UploadRing, TheHostWaitsOnlyWhenTheRingWrapsOntoACopyNotYetRun) {
  FakeStream stream;
  UploadRing ring(1024, stream.Hooks());
  std::vector<char> a = Bytes(256, 1), b = Bytes(256, 2), c = Bytes(256, 3), d = Bytes(256, 4),
                    e = Bytes(256, 5);
  std::vector<char> da(256), db(256), dc(256), dd(256), de(256);
  ASSERT_TRUE(ring.Upload(da.data(), a.data(), 256));
  ASSERT_TRUE(ring.Upload(db.data(), b.data(), 256));
  ASSERT_TRUE(ring.Upload(dc.data(), c.data(), 256));
  ASSERT_TRUE(ring.Upload(dd.data(), d.data(), 256));  // the ring is full, nothing has run
  EXPECT_EQ(stream.host_waits, 0);
  EXPECT_EQ(ring.in_flight(), 4u);
  ASSERT_TRUE(
      ring.Upload(de.data(), e.data(), 256));  // wraps onto a's region: waits for a's copy only
  EXPECT_EQ(stream.host_waits, 1);
  EXPECT_EQ(stream.done, 1);
  EXPECT_EQ(da, a);
  stream.RunUntil(3);  // b and c have run: the next upload retires them without waiting
  std::vector<char> f = Bytes(256, 6), df(256);
  ASSERT_TRUE(ring.Upload(df.data(), f.data(), 256));
  EXPECT_EQ(stream.host_waits, 1);
  EXPECT_EQ(ring.waits(), 1);
  ring.Drain();
  EXPECT_EQ(ring.in_flight(), 0u);
  EXPECT_EQ(db, b);
  EXPECT_EQ(dc, c);
  EXPECT_EQ(dd, d);
  EXPECT_EQ(de, e);
  EXPECT_EQ(df, f);
}

TEST(UploadRing, LargeUploadsAndRefusedPinnedMemoryFallBackToTheCaller) {
  FakeStream stream;
  UploadRing ring(1024, stream.Hooks());
  std::vector<char> big(513), dst(513);
  EXPECT_FALSE(ring.Upload(dst.data(), big.data(), big.size()));  // more than half the ring
  EXPECT_TRUE(ring.Upload(dst.data(), big.data(), 512));
  EXPECT_TRUE(ring.Upload(dst.data(), big.data(), 0));  // nothing to do
  FakeStream refusing;
  refusing.refuse_pinned = true;
  UploadRing no_pinned(1024, refusing.Hooks());
  EXPECT_FALSE(no_pinned.Upload(dst.data(), big.data(), 16));
  EXPECT_FALSE(no_pinned.Upload(dst.data(), big.data(), 16));
  EXPECT_EQ(refusing.pinned_allocs, 1);  // asked once, not at every upload
  ring.Drain();
}

TEST(UploadRing, ACapacityThatIsNotWholeBlocksIsRefused) {
  FakeStream stream;
  EXPECT_DEATH(UploadRing(1000, stream.Hooks()),
               "UploadRing: capacity 1000 is not a multiple of 256");
}

}  // namespace
}  // namespace moe::kernels
