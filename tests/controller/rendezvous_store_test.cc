// RendezvousStore on its own: values, waits fulfilled at once or later, waits timing out at their
// deadline, an attempt's keys erased by prefix, and callbacks that call back into the store.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "controller/rendezvous.h"

namespace moe::controller {
namespace {

struct Outcome {
  int calls = 0;
  Status status;
  std::function<void(Status)> Callback() {
    return [this](Status s) {
      ++calls;
      status = std::move(s);
    };
  }
};

TEST(RendezvousStore, SetThenGet) {
  RendezvousStore kv;
  EXPECT_FALSE(kv.Get("job/j/attempt/1/addr0").has_value());
  ASSERT_TRUE(kv.Set("job/j/attempt/1/addr0", "10.0.0.1:4000").ok());
  ASSERT_TRUE(kv.Set("job/j/attempt/1/addr0", "10.0.0.1:4001").ok());  // replaced
  EXPECT_EQ(kv.Get("job/j/attempt/1/addr0").value_or(""), "10.0.0.1:4001");
  EXPECT_EQ(kv.size(), 1u);
}

TEST(RendezvousStore, AWaitForKeysThatExistIsFulfilledAtOnce) {
  RendezvousStore kv;
  ASSERT_TRUE(kv.Set("k0", "a").ok());
  Outcome out;
  kv.Wait({"k0"}, /*deadline=*/100, out.Callback());
  EXPECT_EQ(out.calls, 1);
  EXPECT_TRUE(out.status.ok());
  EXPECT_EQ(kv.waiting(), 0u);
}

TEST(RendezvousStore, AWaitIsFulfilledOnceTheLastKeyIsSet) {
  RendezvousStore kv;
  Outcome out;
  kv.Wait({"k0", "k1"}, 100, out.Callback());
  ASSERT_TRUE(kv.Set("k0", "a").ok());
  EXPECT_EQ(out.calls, 0) << "k1 is still missing";
  ASSERT_TRUE(kv.Set("k1", "b").ok());
  EXPECT_EQ(out.calls, 1);
  EXPECT_TRUE(out.status.ok());
  ASSERT_TRUE(kv.Set("k1", "c").ok());
  kv.Expire(1000);
  EXPECT_EQ(out.calls, 1) << "called exactly once";
}

TEST(RendezvousStore, AWaitTimesOutAtItsDeadlineNamingTheMissingKey) {
  RendezvousStore kv;
  ASSERT_TRUE(kv.Set("k0", "a").ok());
  Outcome early, late;
  kv.Wait({"k0", "k1"}, 10, early.Callback());
  kv.Wait({"k2"}, 20, late.Callback());
  kv.Expire(9.9);
  EXPECT_EQ(early.calls, 0) << "not before its deadline";
  kv.Expire(10);
  EXPECT_EQ(early.calls, 1);
  EXPECT_EQ(early.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(early.status.message().find("key k1 was not set"), std::string::npos) << early.status;
  EXPECT_EQ(late.calls, 0);
  EXPECT_EQ(kv.waiting(), 1u);
  ASSERT_TRUE(kv.Set("k2", "x").ok());
  EXPECT_EQ(late.calls, 1);
  EXPECT_TRUE(late.status.ok());
  kv.Expire(30);
  EXPECT_EQ(early.calls, 1);
  EXPECT_EQ(late.calls, 1);
}

TEST(RendezvousStore, ErasePrefixDropsOneAttemptsKeysOnly) {
  RendezvousStore kv;
  ASSERT_TRUE(kv.Set("job/j/attempt/1/a", "1").ok());
  ASSERT_TRUE(kv.Set("job/j/attempt/1/b", "1").ok());
  ASSERT_TRUE(kv.Set("job/j/attempt/10/a", "10").ok());
  ASSERT_TRUE(kv.Set("job/j/attempt/2/a", "2").ok());
  ASSERT_TRUE(kv.Set("job/k/attempt/1/a", "k").ok());
  kv.ErasePrefix("job/j/attempt/1/");
  EXPECT_FALSE(kv.Get("job/j/attempt/1/a").has_value());
  EXPECT_FALSE(kv.Get("job/j/attempt/1/b").has_value());
  EXPECT_TRUE(kv.Get("job/j/attempt/10/a").has_value()) << "attempt 10 is not attempt 1";
  EXPECT_TRUE(kv.Get("job/j/attempt/2/a").has_value());
  EXPECT_TRUE(kv.Get("job/k/attempt/1/a").has_value());
  EXPECT_EQ(kv.size(), 3u);
}

TEST(RendezvousStore, CallbacksRunOutsideTheLockAndMayUseTheStore) {
  RendezvousStore kv;
  std::string seen;
  kv.Wait({"k0"}, 100, [&](Status) {
    seen = kv.Get("k0").value_or("");
    ASSERT_TRUE(kv.Set("k1", "from the callback").ok());
  });
  Outcome second;
  kv.Wait({"k1"}, 100, second.Callback());
  ASSERT_TRUE(kv.Set("k0", "v").ok());
  EXPECT_EQ(seen, "v");
  EXPECT_EQ(second.calls, 1);
}

TEST(RendezvousStore, RanksRendezvousFromManyThreads) {
  RendezvousStore kv;
  constexpr int kRanks = 8;
  std::vector<std::string> keys;
  for (int r = 0; r < kRanks; ++r) keys.push_back("job/j/attempt/1/rank" + std::to_string(r));
  std::atomic<int> fulfilled{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      kv.Wait(keys, 100, [&](Status s) { fulfilled += s.ok() ? 1 : 0; });
      ASSERT_TRUE(kv.Set(keys[static_cast<size_t>(r)], std::to_string(r)).ok());
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(fulfilled.load(), kRanks);
  EXPECT_EQ(kv.waiting(), 0u);
}

}  // namespace
}  // namespace moe::controller
