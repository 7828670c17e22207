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
  EXPECT_EQ(registry_.Find("a")->info.last_heartbeat(), clock_.Now());
  registry_.Heartbeat("b");
  EXPECT_EQ(StateOf("b"), moe::v1::LOST)
      << "a lost worker comes back by registering, not by a heartbeat";
  EXPECT_EQ(Names(registry_.LiveSlots()), (std::vector<std::string>{"a"}));
}

TEST_F(WorkerRegistryTest, AReconnectReplacesTheStreamAndTheOldStreamsEndIsIgnored) {
  ASSERT_TRUE(registry_.Register(Reg("a"), &ch1_).ok());
  clock_.Advance(6);
  ASSERT_EQ(registry_.ExpireLeases().size(), 1u);
  auto back = registry_.Register(Reg("a"), &ch2_);
  ASSERT_TRUE(back.ok()) << "a lost worker may take its name back on a new stream";
  EXPECT_EQ((*back)->channel, &ch2_);
  EXPECT_FALSE((*back)->lost);
  EXPECT_FALSE(registry_.Disconnected("a", &ch1_))
      << "the old stream closing late does not lose the new one";
  EXPECT_EQ(StateOf("a"), moe::v1::IDLE);
  EXPECT_TRUE(registry_.Disconnected("a", &ch2_));
  EXPECT_EQ(StateOf("a"), moe::v1::LOST);
  EXPECT_FALSE(registry_.Disconnected("a", &ch2_)) << "lost once";
  EXPECT_FALSE(registry_.Disconnected("nobody", &ch2_));
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
  EXPECT_TRUE(registry_.Disconnected("b", &ch2_));
  EXPECT_EQ(registry_.CpuThreadsFor("a"), 16) << "a lost worker no longer shares the cores";
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
