// WorkerRegistry on its own, on a fake clock: registration, leases, reconnects replacing a stream,
// drain, slots for the scheduler, and CPU thread shares.
#include "controller/worker_registry.h"

#include <gtest/gtest.h>

namespace moe::controller {
namespace {

class NullChannel final : public WorkerChannel {
 public:
  void Send(const moe::v1::ControllerMessage&) override {}
};

moe::v1::Register Reg(const std::string& name, const std::string& node = "n0",
                      const std::string& device = "cpu", int cores = 0,
                      const std::string& host = "") {
  moe::v1::Register r;
  r.set_name(name);
  r.set_rack("r0");
  r.set_node(node);
  r.set_device(device);
  r.set_cpu_cores(cores);
  r.set_host_id(host);
  return r;
}

std::vector<std::string> Names(const std::vector<Slot>& slots) {
  std::vector<std::string> out;
  for (const auto& s : slots) out.push_back(s.worker);
  return out;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  moe::v1::WorkerState StateOf(const std::string& name) {
    return registry_.Describe(*registry_.Find(name)).state();
  }

  FakeClock clock_;
  WorkerRegistry registry_{clock_, /*lease_seconds=*/5};
  NullChannel ch1_, ch2_;
};

TEST_F(WorkerRegistryTest, RegisterChecksItsFieldsAndRefusesATakenName) {
  EXPECT_EQ(registry_.Register(Reg(""), &ch1_).status().code(), StatusCode::kInvalidArgument);
  auto no_device = Reg("a");
  no_device.clear_device();
  const auto refused = registry_.Register(no_device, &ch1_);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("device"), std::string::npos) << refused.status();

  auto a = registry_.Register(Reg("a"), &ch1_);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->info.registered_at(), clock_.Now());
  EXPECT_EQ(registry_.Register(Reg("a"), &ch2_).status().code(), StatusCode::kAlreadyExists)
      << "a live, connected worker keeps its name";
  EXPECT_EQ(StateOf("a"), moe::v1::IDLE);
}

TEST_F(WorkerRegistryTest, ALeaseRunsOutOnTheClockUnlessRenewed) {
  ASSERT_TRUE(registry_.Register(Reg("a"), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(Reg("b", "n1"), &ch2_).ok());
  registry_.Heartbeat("a");  // each beats on its answer, as agents do: the plain lease from here
  registry_.Heartbeat("b");
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(2);
    registry_.Heartbeat("a");  // a keeps beating; b fell silent
    if (i < 2) {
      EXPECT_TRUE(registry_.ExpireLeases().empty()) << "b has 5 s";
    }
  }
  EXPECT_EQ(registry_.ExpireLeases(), (std::vector<std::string>{"b"}));
  EXPECT_TRUE(registry_.ExpireLeases().empty()) << "each lost worker is named once";
  EXPECT_EQ(StateOf("b"), moe::v1::LOST);
  EXPECT_EQ(StateOf("a"), moe::v1::IDLE);
  EXPECT_EQ(registry_.Describe(*registry_.Find("a")).last_heartbeat(), clock_.Now());
  registry_.Heartbeat("b");
  EXPECT_EQ(StateOf("b"), moe::v1::LOST)
      << "a lost worker comes back by registering, not by a heartbeat";
  EXPECT_EQ(Names(registry_.LiveSlots()), (std::vector<std::string>{"a"}));
}

TEST_F(WorkerRegistryTest, AReconnectReplacesTheStreamAndTheOldStreamsEndIsIgnored) {
  auto first = registry_.Register(Reg("a"), &ch1_);
  ASSERT_TRUE(first.ok());
  const std::string session = (*first)->session;
  clock_.Advance(16);  // never heard from: its lease and the grace for the answer's arrival
  ASSERT_EQ(registry_.ExpireLeases().size(), 1u);
  auto with_session = Reg("a");
  with_session.set_session(session);
  auto back = registry_.Register(with_session, &ch2_);
  ASSERT_TRUE(back.ok()) << "a lost worker may take its name back on a new stream";
  EXPECT_EQ((*back)->channel, &ch2_);
  EXPECT_FALSE((*back)->lost);
  EXPECT_TRUE(registry_.Disconnected("a", &ch1_).empty())
      << "the old stream closing late does not lose the new one";
  EXPECT_EQ(StateOf("a"), moe::v1::IDLE);
  EXPECT_EQ(registry_.Disconnected("a", &ch2_), (std::vector<std::string>{"a"}));
  EXPECT_EQ(StateOf("a"), moe::v1::LOST);
  EXPECT_TRUE(registry_.Disconnected("a", &ch2_).empty()) << "lost once";
  EXPECT_TRUE(registry_.Disconnected("nobody", &ch2_).empty());
}

TEST_F(WorkerRegistryTest, DrainedAndBusyWorkersTakeNoNewWork) {
  ASSERT_TRUE(registry_.Register(Reg("a"), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(Reg("b", "n1"), &ch2_).ok());
  ASSERT_TRUE(registry_.SetDrained("a", true).ok());
  EXPECT_EQ(StateOf("a"), moe::v1::DRAINED);
  EXPECT_EQ(Names(registry_.FreeSlots()), (std::vector<std::string>{"b"}));
  EXPECT_EQ(Names(registry_.LiveSlots()), (std::vector<std::string>{"a", "b"}))
      << "drained workers still count for fit";
  registry_.Assign("b", "job-1", 1, 0);
  EXPECT_TRUE(registry_.FreeSlots().empty());
  const moe::v1::Worker b = registry_.Describe(*registry_.Find("b"));
  EXPECT_EQ(b.state(), moe::v1::BUSY);
  EXPECT_EQ(b.job_id(), "job-1");
  ASSERT_TRUE(registry_.SetDrained("b", true).ok());
  EXPECT_EQ(StateOf("b"), moe::v1::BUSY) << "a drained worker finishes what it runs";
  registry_.Release("b");
  EXPECT_EQ(StateOf("b"), moe::v1::DRAINED);
  ASSERT_TRUE(registry_.SetDrained("a", false).ok());
  EXPECT_EQ(Names(registry_.FreeSlots()), (std::vector<std::string>{"a"}));
  EXPECT_EQ(registry_.SetDrained("nobody", true).code(), StatusCode::kNotFound);
}

// Spares are a count per rack and device type: whichever idle workers are left. A busy worker
// beyond the rack's placeable workers less N runs on the reserve (a restart on a spare; or the rack
// lost, or drained, a healthy worker under running jobs).
TEST_F(WorkerRegistryTest, RacksCountTheirWorkersByStateAndTheirSparesPerDeviceType) {
  for (const char* n : {"c0", "c1", "c2", "c3"})
    ASSERT_TRUE(registry_.Register(Reg(n), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(Reg("g0", "n1", "cuda:0"), &ch2_).ok());
  ASSERT_TRUE(registry_.Register(Reg("g1", "n1", "cuda:1"), &ch2_).ok());
  RackCount r = registry_.CountByRack(1).at("r0");
  EXPECT_EQ(r.workers, 6);
  EXPECT_EQ(r.idle, 6);
  EXPECT_EQ(r.spares, 2) << "one cpu and one cuda";
  EXPECT_EQ(r.spares_in_use, 0);
  EXPECT_EQ(registry_.CountByRack(0).at("r0").spares, 0) << "no --spares-per-rack, no spares";
  for (const char* n : {"c0", "c1", "c2"}) registry_.Assign(n, "j", 1, 0);
  r = registry_.CountByRack(1).at("r0");
  EXPECT_EQ(r.busy, 3);
  EXPECT_EQ(r.spares, 2) << "c3 is the cpu spare";
  EXPECT_EQ(r.spares_in_use, 0) << "3 busy of 4 with 1 held back";
  ASSERT_TRUE(registry_.SetDrained("c3", true).ok());
  r = registry_.CountByRack(1).at("r0");
  EXPECT_EQ(r.draining, 1);
  EXPECT_EQ(r.spares, 1) << "the cuda one";
  EXPECT_EQ(r.spares_in_use, 1) << "the cpu spare drained: a busy worker runs on the reserve";
  EXPECT_EQ(registry_.CountByRack(2).at("r0").spares_in_use, 2);
}

TEST_F(WorkerRegistryTest, CpuRanksShareTheCoresOfTheirMachine) {
  NullChannel ch3, ch4;
  // Two CPU workers on one host (named as different nodes), one on another host, one GPU worker.
  ASSERT_TRUE(registry_.Register(Reg("a", "node-a", "cpu", 16, "host-1"), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(Reg("b", "node-b", "cpu", 16, "host-1"), &ch2_).ok());
  ASSERT_TRUE(registry_.Register(Reg("c", "node-c", "cpu", 16, "host-2"), &ch3).ok());
  ASSERT_TRUE(registry_.Register(Reg("g", "node-a", "cuda:0", 16, "host-1"), &ch4).ok());
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 8);
  EXPECT_EQ(registry_.CpuThreadsFor("c"), 16);
  EXPECT_EQ(registry_.CpuThreadsFor("g"), 0) << "not a CPU rank";
  EXPECT_EQ(registry_.CpuThreadsFor("nobody"), 0);
  EXPECT_TRUE(!registry_.Disconnected("b", &ch2_).empty());
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 16) << "a lost worker no longer shares the cores";
}

// A worker lost while it ran a rank keeps its share of the host's memory: the rank may still run
// there (a partition, a hung agent). Re-split without it, a job refused at submit for the share was
// placed and grew past it. Idle when lost, or back again: the share is split as before.
TEST_F(WorkerRegistryTest, ALostWorkerWithARankKeepsItsShareOfTheHost) {
  NullChannel ch3;
  auto cpu = [](const std::string& name, const std::string& node) {
    moe::v1::Register r = Reg(name, node, "cpu", 16, "host-1");
    r.set_memory_bytes(int64_t{24} << 30);
    return r;
  };
  ASSERT_TRUE(registry_.Register(cpu("a", "node-a"), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(cpu("b", "node-b"), &ch2_).ok());
  ASSERT_TRUE(registry_.Register(cpu("c", "node-c"), &ch3).ok());
  EXPECT_EQ(registry_.MemoryFor("a"), int64_t{8} << 30);
  registry_.Assign("b", "job-1", 1, 0);
  EXPECT_FALSE(registry_.Disconnected("b", &ch2_).empty());
  registry_.Release("b");  // the controller gives up on the rank; the host may not have
  EXPECT_EQ(registry_.MemoryFor("a"), int64_t{8} << 30) << "b's rank may still hold its share";
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 5);
  EXPECT_FALSE(registry_.Disconnected("c", &ch3).empty());  // idle when lost: its share is free
  EXPECT_EQ(registry_.MemoryFor("a"), int64_t{12} << 30);
  clock_.Advance(10);  // past the hold of its name (a new session: this test keeps none)
  ASSERT_TRUE(registry_.Register(cpu("b", "node-b"), &ch2_).ok()) << "back, saying what it runs";
  EXPECT_EQ(registry_.MemoryFor("a"), int64_t{12} << 30);
  EXPECT_FALSE(registry_.Disconnected("b", &ch2_).empty());  // lost again, idle this time
  EXPECT_EQ(registry_.MemoryFor("a"), int64_t{24} << 30);
}

// Roomiest is cached between changes: it must follow every change the shares follow from (a worker
// registered, lost, back, another on its host), or a submit's memory check judges a stale cluster.
TEST_F(WorkerRegistryTest, TheRoomiestWorkerFollowsEveryChange) {
  auto cpu = [](const std::string& name, const std::string& node, int64_t gib) {
    moe::v1::Register r = Reg(name, node, "cpu", 16, "host-" + name);
    r.set_memory_bytes(gib << 30);
    return r;
  };
  EXPECT_EQ(registry_.Roomiest(true).bytes, 0) << "no worker yet";
  ASSERT_TRUE(registry_.Register(cpu("a", "node-a", 8), &ch1_).ok());
  EXPECT_EQ(registry_.Roomiest(true).bytes, int64_t{8} << 30);
  EXPECT_EQ(registry_.Roomiest(false).bytes, 0) << "no GPU worker";
  ASSERT_TRUE(registry_.Register(cpu("b", "node-b", 32), &ch2_).ok());
  EXPECT_EQ(registry_.Roomiest(true).name, "b");
  EXPECT_FALSE(registry_.Disconnected("b", &ch2_).empty());  // lost: not the roomiest any more
  EXPECT_EQ(registry_.Roomiest(true).name, "a");
  EXPECT_EQ(registry_.Roomiest(true).bytes, int64_t{8} << 30);
  NullChannel ch3;
  moe::v1::Register a2 = Reg("a2", "node-a2", "cpu", 16, "host-a");  // shares a's host
  a2.set_memory_bytes(int64_t{8} << 30);
  ASSERT_TRUE(registry_.Register(a2, &ch3).ok());
  EXPECT_EQ(registry_.Roomiest(true).bytes, int64_t{4} << 30) << "a's host is shared now";
  registry_.Remove("a2");
  EXPECT_EQ(registry_.Roomiest(true).bytes, int64_t{8} << 30);
}

TEST_F(WorkerRegistryTest, WithoutAHostIdWorkersShareByNode) {
  ASSERT_TRUE(registry_.Register(Reg("a", "n0", "cpu", 6), &ch1_).ok());
  ASSERT_TRUE(registry_.Register(Reg("b", "n0", "cpu", 6), &ch2_).ok());
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 3);
  ASSERT_TRUE(registry_.Register(Reg("b", "n1", "cpu", 6), &ch2_).ok())
      << "re-registering on its own stream";
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 6);
}

}  // namespace
}  // namespace moe::controller

namespace moe::controller {
namespace {

TEST_F(WorkerRegistryTest, ANameIsHeldByItsSessionUntilALeaseAfterItWasLastHeardFrom) {
  auto a = registry_.Register(Reg("a"), &ch1_);
  ASSERT_TRUE(a.ok());
  const std::string session = (*a)->session;
  EXPECT_EQ(session.size(), 64u) << "32 random bytes in hex";
  EXPECT_EQ(registry_.FindBySession(session),
            (std::vector<const WorkerEntry*>{registry_.Find("a")}));
  EXPECT_TRUE(registry_.FindBySession("guess").empty());
  EXPECT_TRUE(registry_.FindBySession("").empty());
  ASSERT_TRUE(!registry_.Disconnected("a", &ch1_).empty());
  EXPECT_TRUE(registry_.FindBySession(session).empty()) << "a lost worker's session opens nothing";
  const auto taken = registry_.Register(Reg("a"), &ch2_);
  EXPECT_EQ(taken.status().code(), StatusCode::kPermissionDenied)
      << "a takeover while the name is held";
  auto wrong = Reg("a");
  wrong.set_session("0123");
  EXPECT_EQ(registry_.Register(wrong, &ch2_).status().code(), StatusCode::kPermissionDenied);
  auto own = Reg("a");
  own.set_session(session);
  auto back = registry_.Register(own, &ch2_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->session, session) << "its own reconnect keeps the session";
  ASSERT_TRUE(!registry_.Disconnected("a", &ch2_).empty());
  clock_.Advance(5.5);
  auto fresh = registry_.Register(Reg("a"), &ch1_);
  ASSERT_TRUE(fresh.ok()) << "after the hold a restarted worker takes its name back: "
                          << fresh.status();
  EXPECT_NE((*fresh)->session, session) << "with a new session";
}

TEST_F(WorkerRegistryTest, StepReportsAreLimitedPerSecond) {
  ASSERT_TRUE(registry_.Register(Reg("a"), &ch1_).ok());
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) allowed += registry_.AllowStepReport("a") ? 1 : 0;
  EXPECT_EQ(allowed, WorkerRegistry::kMaxStepReportsPerSecond);
  clock_.Advance(1);
  EXPECT_TRUE(registry_.AllowStepReport("a")) << "a new second, a new allowance";
  EXPECT_FALSE(registry_.AllowStepReport("nobody"));
}

TEST_F(WorkerRegistryTest, ARestoredNameIsHeldForTheGivenTime) {
  moe::v1::Worker info;
  info.set_name("a");
  registry_.Restore(info, "s-1", 15);
  EXPECT_EQ(StateOf("a"), moe::v1::LOST);
  EXPECT_EQ(registry_.Register(Reg("a"), &ch1_).status().code(), StatusCode::kPermissionDenied);
  auto own = Reg("a");
  own.set_session("s-1");
  EXPECT_TRUE(registry_.Register(own, &ch1_).ok());
}

TEST_F(WorkerRegistryTest, ClaimsOutsideTheGrammarAreRefusedNamingTheField) {
  auto field_of = [&](moe::v1::Register r) {
    const auto st = registry_.Register(r, &ch1_).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    return st.message();
  };
  auto r = Reg("a");
  r.set_name("evil\nname");
  EXPECT_NE(field_of(r).find("register: name"), std::string::npos);
  r = Reg("a\x1b[31m");
  EXPECT_NE(field_of(r).find("register: name"), std::string::npos);
  r = Reg("a");
  r.set_rack("");
  EXPECT_NE(field_of(r).find("register: rack"), std::string::npos);
  r.set_rack(std::string(1 << 20, 'r'));
  EXPECT_NE(field_of(r).find("register: rack"), std::string::npos);
  for (const char* d : {"cuda:-1", "cuda:", "cuda:01", "cuda:99999", "gpu0", "cpu "}) {
    EXPECT_NE(field_of(Reg("a", "n0", d)).find("register: device"), std::string::npos) << d;
  }
  EXPECT_NE(field_of(Reg("a", "n0", "cpu", -4)).find("cpu_cores"), std::string::npos);
  r = Reg("a");
  r.set_address("10.0.0.1; rm -rf /");
  EXPECT_NE(field_of(r).find("register: address"), std::string::npos);
  EXPECT_TRUE(registry_.Register(Reg("a", "n0", "cuda:7", 64), &ch1_).ok());
  r = Reg("b", "n0");
  r.set_rack("8a3f0c1e-1d2b-4c5d-9e8f-0a1b2c3d4e5f.3");
  EXPECT_TRUE(registry_.Register(r, &ch2_).ok()) << "NVML's clusterUuid.cliqueId is a rack";
}

}  // namespace
}  // namespace moe::controller
