// The controller's write path and leases on their own: GroupCommitStore batches concurrent writes
// into one transaction each, answers every caller with its batch's status (a refused batch refuses
// them all, telemetry never refuses a change), keeps their order, and lets readers in while a
// commit is under way; LeaseBook renews without the controller's lock, expires a silent worker and
// gives every lease back the time the controller itself stalled.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "controller/group_commit.h"
#include "controller/lease_book.h"
#include "tests/controller/flaky_store.h"

namespace moe::controller {
namespace {

moe::v1::Job JobNamed(const std::string& id, moe::v1::JobState state = moe::v1::PENDING) {
  moe::v1::Job j;
  j.set_id(id);
  j.set_state(state);
  return j;
}

// Counts the transactions the writer opens (Batch) around a memory store.
class CountingStore final : public StateStore {
 public:
  std::atomic<int> batches{0};
  Status PutJob(const moe::v1::Job& j) override { return m_.PutJob(j); }
  Status AppendEvent(const moe::v1::JobEvent& e) override { return m_.AppendEvent(e); }
  Status PutJobWithEvent(const moe::v1::Job& j, const moe::v1::JobEvent& e) override {
    return m_.PutJobWithEvent(j, e);
  }
  StatusOr<std::vector<moe::v1::Job>> LoadJobs() override { return m_.LoadJobs(); }
  StatusOr<std::vector<moe::v1::JobEvent>> LoadEvents(const std::string& id) override {
    return m_.LoadEvents(id);
  }
  Status DeleteJob(const std::string& id) override { return m_.DeleteJob(id); }
  Status PutWorker(const moe::v1::Worker& w, const std::string& s) override {
    return m_.PutWorker(w, s);
  }
  StatusOr<std::vector<StoredWorker>> LoadWorkers() override { return m_.LoadWorkers(); }
  Status DeleteWorker(const std::string& n) override { return m_.DeleteWorker(n); }
  Status PutNodeCredential(const moe::v1::NodeCredential& c) override {
    return m_.PutNodeCredential(c);
  }
  StatusOr<std::vector<moe::v1::NodeCredential>> LoadNodeCredentials() override {
    return m_.LoadNodeCredentials();
  }
  Status DeleteNodeCredential(const std::string& s) override { return m_.DeleteNodeCredential(s); }
  StatusOr<int64_t> NextEpoch() override { return m_.NextEpoch(); }
  StatusOr<int64_t> StoredEpoch() override { return m_.StoredEpoch(); }
  Status Batch(const std::function<Status()>& writes) override {
    ++batches;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // an fsync's time
    return writes();
  }

 private:
  MemoryStateStore m_;
};

TEST(GroupCommitTest, ConcurrentWritesShareTransactionsAndAllAreStored) {
  CountingStore durable;
  GroupCommitStore store(durable);
  constexpr int kThreads = 16, kEach = 10;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!store.PutJob(JobNamed("j" + std::to_string(t) + "-" + std::to_string(i))).ok())
          ++failed;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(durable.LoadJobs()->size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(store.writes(), kThreads * kEach);
  // 16 writers, each waiting for its batch: a batch carries several of them (one at a time would be
  // 160 transactions).
  EXPECT_LT(durable.batches.load(), kThreads * kEach / 3) << "writes were not batched";
  EXPECT_EQ(store.batches(), durable.batches.load());
}

TEST(GroupCommitTest, ARefusedBatchRefusesItsChangesAndTelemetryNeverRefusesOne) {
  FlakyStateStore durable;
  GroupCommitStore store(durable);
  ASSERT_TRUE(store.PutJob(JobNamed("a")).ok());
  durable.fail_writes = true;
  EXPECT_EQ(store.PutJob(JobNamed("b")).code(), StatusCode::kUnavailable);
  store.PutJobLater(JobNamed("a", moe::v1::RUNNING));  // fails in its batch: dropped, logged
  durable.fail_writes = false;
  ASSERT_TRUE(store.PutJob(JobNamed("c")).ok());
  const auto jobs = *durable.LoadJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id(), "a");
  EXPECT_EQ(jobs[1].id(), "c");
}

TEST(GroupCommitTest, WritesKeepTheirOrderAndTelemetryJoinsTheNextBatch) {
  MemoryStateStore durable;
  GroupCommitStore store(durable);
  store.PutJobLater(JobNamed("a", moe::v1::RUNNING));
  ASSERT_TRUE(store.PutJob(JobNamed("a", moe::v1::SUCCEEDED)).ok());  // after the telemetry: wins
  EXPECT_EQ((*durable.LoadJobs())[0].state(), moe::v1::SUCCEEDED);
}

TEST(GroupCommitTest, TheCallersLockIsReleasedWhileTheyWaitAndHeldAgainAfter) {
  CountingStore durable;
  GroupCommitStore store(durable);
  Mutex mu;
  store.SetCallerLock(&mu);
  std::atomic<bool> reader_got_in{false};
  mu.Lock();
  std::thread reader([&] {
    mu.Lock();  // only possible while the writer waits for its batch
    reader_got_in = true;
    mu.Unlock();
  });
  ASSERT_TRUE(store.PutJob(JobNamed("a")).ok());
  reader.join();
  EXPECT_TRUE(reader_got_in.load());
  EXPECT_FALSE(mu.TryLock()) << "the caller does not hold its lock again after the write";
  mu.Unlock();
}

TEST(GroupCommitTest, SqliteBatchIsOneTransactionWithEveryWriteAndReadersDoNotWait) {
  const std::string dir = ::testing::TempDir() + "/write_path_sqlite";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto durable = SqliteStateStore::Open(dir + "/state.db");
  ASSERT_TRUE(durable.ok()) << durable.status();
  GroupCommitStore store(**durable);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        EXPECT_TRUE(store.PutJob(JobNamed("s" + std::to_string(t) + "-" + std::to_string(i))).ok());
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*durable)->LoadJobs()->size(), 160u);
  EXPECT_LE(store.batches(), store.writes());
}

TEST(LeaseBookTest, RenewExpireAndTheStreamThatHoldsTheLease) {
  FakeClock clock;
  LeaseBook book(clock, 10);
  int a = 0, b = 0;  // two streams
  book.Open("w", &a);
  book.NoteTick();
  clock.Advance(6);
  book.NoteTick();  // 6 s without a tick: a stall, given back
  EXPECT_TRUE(book.Renew("w", &a));
  EXPECT_FALSE(book.Renew("w", &b)) << "an old or foreign stream renewed the lease";
  EXPECT_FALSE(book.Renew("nobody", &a));
  for (int i = 0; i < 105; ++i) {  // ticking every 100 ms for 10.5 s, nothing heard
    clock.Advance(0.1);
    book.NoteTick();
  }
  const auto expired = book.Expire();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0], "w");
  EXPECT_TRUE(book.Expire().empty()) << "a lease expired twice";
  EXPECT_FALSE(book.Renew("w", &a)) << "an expired lease was renewed";
}

TEST(LeaseBookTest, TheControllersOwnStallExpiresNoLease) {
  FakeClock clock;
  LeaseBook book(clock, 3);
  int ch = 0;
  book.Open("w", &ch);
  EXPECT_TRUE(book.Renew("w", &ch));  // its first beat: the plain lease from here on
  book.NoteTick();
  clock.Advance(0.1);
  book.NoteTick();
  clock.Advance(20);  // SIGSTOP: neither ticks nor heartbeats for 20 s
  book.NoteTick();
  EXPECT_TRUE(book.Expire().empty()) << "the controller's own stall expired a lease";
  EXPECT_NEAR(book.stalled_seconds(), 20, 1e-9);
  for (int i = 0; i < 35; ++i) {  // then silence while it runs: the lease ends 3 s on
    clock.Advance(0.1);
    book.NoteTick();
  }
  EXPECT_EQ(book.Expire().size(), 1u);
}

// A fresh registration's lease lasts a lease longer until the agent is first heard from (the
// controller cannot see when its answer arrived); the answer's leaving restarts it, still in that
// grace; the first beat ends the grace.
TEST(LeaseBookTest, AFreshLeaseWaitsLongerForItsFirstBeat) {
  FakeClock clock;
  LeaseBook book(clock, 3);
  const double grace = LeaseBook::kAnswerGraceSeconds;
  int ch = 0, other = 0;
  book.Open("quiet", &ch);  // never heard from
  book.Open("late", &ch);   // answered 2 s on, then heard 9 s after that
  book.Open("heard", &ch);  // heard at once, then silent
  EXPECT_TRUE(book.Renew("heard", &ch));
  EXPECT_FALSE(book.Answered("late", &other)) << "another stream's answer restarted the lease";
  std::vector<std::pair<int, std::string>> expired;  // (tick, name)
  for (int t = 1; t <= 200; ++t) {
    clock.Advance(0.1);
    book.NoteTick();
    if (t == 20) {
      EXPECT_TRUE(book.Answered("late", &ch));
    }
    if (t == 110) {
      EXPECT_TRUE(book.Renew("late", &ch));
    }
    for (auto& n : book.Expire()) expired.emplace_back(t, n);
  }
  ASSERT_EQ(expired.size(), 3u);
  EXPECT_EQ(expired[0].second, "heard");  // 3 s after its beat
  EXPECT_NEAR(expired[0].first, 30, 1);
  EXPECT_EQ(expired[1].second, "quiet");  // the lease and the grace after its registration
  EXPECT_NEAR(expired[1].first, 10 * (3 + grace), 1);
  EXPECT_EQ(expired[2].second, "late");  // in its grace until heard at 11 s, then the plain lease
  EXPECT_NEAR(expired[2].first, 140, 1);
}

// Expire looks at each lease about once a lease period (a queue of due times), not at every tick:
// a lease renewed since its entry was queued is looked at again a lease after its renewal, one
// closed and opened again runs from its new start, and of many only the silent ones expire, once.
TEST(LeaseBookTest, DueTimesFollowRenewalsReopensAndManyLeases) {
  FakeClock clock;
  LeaseBook book(clock, 3);
  int ch = 0;
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) {
    names.push_back("w" + std::to_string(i));
    book.Open(names.back(), &ch);
  }
  book.NoteTick();
  // For 10 s the even ones heartbeat each second; the odd ones stop after 2 s.
  std::vector<std::string> expired;
  for (int t = 1; t <= 100; ++t) {
    clock.Advance(0.1);
    book.NoteTick();
    if (t % 10 == 0) {
      for (int i = 0; i < 1000; ++i) {
        if (i % 2 == 0 || t <= 20) {
          EXPECT_TRUE(book.Renew(names[i], &ch)) << names[i] << " at " << t;
        }
      }
    }
    for (auto& n : book.Expire()) expired.push_back(n);
    if (t == 55) {
      EXPECT_EQ(expired.size(), 500u) << "the silent half expires 3 s after its last beat";
    }
  }
  ASSERT_EQ(expired.size(), 500u);
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(std::unique(expired.begin(), expired.end()), expired.end()) << "a lease expired twice";
  for (const auto& n : expired) EXPECT_EQ(std::stoi(n.substr(1)) % 2, 1) << n << " kept beating";
  // Closed at 10 s and opened again at 12 s: its lease runs from 12 s, not from its first start.
  book.Close(names[0]);
  clock.Advance(2);
  book.NoteTick();  // a 2 s gap: given back as a stall; the hearing clock moves on by nothing
  book.Open(names[0], &ch);
  EXPECT_TRUE(book.Renew(names[0], &ch));  // heard at once: the plain lease
  for (int t = 1; t <= 29; ++t) {
    clock.Advance(0.1);
    book.NoteTick();
    for (const auto& n : book.Expire()) {
      EXPECT_NE(n, names[0]) << "expired before its new term";
    }
  }
  clock.Advance(0.2);
  book.NoteTick();
  const auto late = book.Expire();
  EXPECT_NE(std::find(late.begin(), late.end(), names[0]), late.end());
}

}  // namespace
}  // namespace moe::controller
