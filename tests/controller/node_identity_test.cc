// Node identity (controller/node_credentials.h): a bootstrap token becomes one credential per node,
// bound to its name and rack; a credential registers only its own node and that node's names; a new
// session of a node closes the old stream; revocation, quotas and bulk pruning. Each case fails
// without the piece it names (the shared worker token let one client register any node's names,
// and 263,424 lost devices locked new agents out).
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec_proto.h"
#include "controller/controller.h"

namespace moe::controller {
namespace {

class FakeClock final : public Clock {
 public:
  double Now() const override { return 1.7e9 + t; }
  double Monotonic() const override { return t; }
  double t = 1000;
};

class Channel final : public WorkerChannel {
 public:
  void Send(const moe::v1::ControllerMessage& m) override { sent.push_back(m); }
  void Close(const std::string& why) override { closed = why; }
  std::vector<moe::v1::ControllerMessage> sent;
  std::string closed;
};

moe::v1::Register Reg(const std::string& name, const std::string& node, const std::string& rack,
                      const std::string& session = "") {
  moe::v1::Register r;
  r.set_name(name);
  r.set_node(node);
  r.set_rack(rack);
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_session(session);
  return r;
}

class NodeIdentityTest : public ::testing::Test {
 protected:
  NodeIdentityTest() { Make(); }
  void Make() {
    metrics_ = std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(), clock_,
                                                   StragglerOptions{}, 60, "t");
    c_ = std::make_unique<Controller>(store_, clock_, *metrics_, config_);
    ASSERT_TRUE(c_->Recover().ok());
  }
  // The node's credential, bootstrapped; its identity as the gRPC layer would find it.
  WorkerIdentity Boot(const std::string& node, const std::string& rack) {
    moe::v1::BootstrapRequest req;
    req.set_node(node);
    req.set_rack(rack);
    auto r = c_->Bootstrap(req, "fleet");
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    credentials_[node] = r->credential();
    auto found = c_->node_credentials().Find(r->credential());
    EXPECT_TRUE(found.has_value());
    return {found->node(), found->rack(), {}};
  }
  Channel* NewChannel() { return channels_.emplace_back(std::make_unique<Channel>()).get(); }

  FakeClock clock_;
  MemoryStateStore store_;
  ControllerConfig config_;
  std::unique_ptr<MetricsAggregator> metrics_;
  std::unique_ptr<Controller> c_;
  std::map<std::string, std::string> credentials_;
  std::vector<std::unique_ptr<Channel>> channels_;
};

TEST_F(NodeIdentityTest, ANodeBootstrapsOnceAndItsCredentialIsStoredHashed) {
  Boot("n0", "r0");
  moe::v1::BootstrapRequest again;
  again.set_node("n0");
  again.set_rack("r0");
  EXPECT_EQ(c_->Bootstrap(again, "fleet").status().code(), StatusCode::kAlreadyExists);
  auto stored = store_.LoadNodeCredentials();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].sha256(), Sha256Hex(credentials_["n0"]));
  EXPECT_EQ((*stored)[0].DebugString().find(credentials_["n0"]), std::string::npos)
      << "the credential itself was stored";
  EXPECT_FALSE(c_->node_credentials().Find("moe-node-" + std::string(64, '0')).has_value());
  moe::v1::BootstrapRequest bad;
  bad.set_node("../n1");
  bad.set_rack("r0");
  EXPECT_EQ(c_->Bootstrap(bad, "fleet").status().code(), StatusCode::kInvalidArgument);
  // After a controller restart the credential is still the node's.
  Make();
  auto found = c_->node_credentials().Find(credentials_["n0"]);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->node(), "n0");
}

TEST_F(NodeIdentityTest, ACredentialRegistersOnlyItsOwnNodeRackAndNames) {
  const WorkerIdentity n0 = Boot("n0", "r0"), n1 = Boot("n1", "r1");
  ASSERT_TRUE(c_->Register(Reg("w0", "n0", "r0"), NewChannel(), n0).ok());
  auto other_node = c_->Register(Reg("w9", "n0", "r1"), NewChannel(), n1);
  EXPECT_EQ(other_node.status().code(), StatusCode::kPermissionDenied) << other_node.status();
  auto other_rack = c_->Register(Reg("w9", "n0", "r9"), NewChannel(), n0);
  EXPECT_EQ(other_rack.status().code(), StatusCode::kPermissionDenied) << other_rack.status();
  // n1 names its registration n1 but takes n0's worker name: refused, connected or silent.
  auto taken = c_->Register(Reg("w0", "n1", "r1"), NewChannel(), n1);
  EXPECT_EQ(taken.status().code(), StatusCode::kPermissionDenied) << taken.status();
  EXPECT_NE(taken.status().message().find("belongs to node n0"), std::string::npos);
  c_->Disconnected("w0", channels_[0].get());
  clock_.t += 3600;  // long past any hold
  EXPECT_EQ(c_->Register(Reg("w0", "n1", "r1"), NewChannel(), n1).status().code(),
            StatusCode::kPermissionDenied)
      << "a silent worker's name went to another node";
  // An mTLS certificate names its node.
  WorkerIdentity cert;
  cert.cert_names = {"n5", "n5.example"};
  EXPECT_TRUE(c_->Register(Reg("w5", "n5", "r0"), NewChannel(), cert).ok());
  EXPECT_EQ(c_->Register(Reg("w6", "n6", "r0"), NewChannel(), cert).status().code(),
            StatusCode::kPermissionDenied);
}

TEST_F(NodeIdentityTest, ANewSessionOfTheNodeClosesTheOldStreamAndTheStaleOneIsSuperseded) {
  const WorkerIdentity n0 = Boot("n0", "r0");
  Channel* first = NewChannel();
  auto r1 = c_->Register(Reg("w0", "n0", "r0"), first, n0);
  ASSERT_TRUE(r1.ok());
  // The agent restarted (no session): its names are taken over at once, the old stream closed.
  Channel* second = NewChannel();
  auto r2 = c_->Register(Reg("w0", "n0", "r0"), second, n0);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_NE(r2->session(), r1->session());
  EXPECT_NE(first->closed.find("superseded"), std::string::npos) << first->closed;
  EXPECT_TRUE(second->closed.empty());
  // The displaced agent comes back with its old session: told it was superseded (it stops).
  auto stale = c_->Register(Reg("w0", "n0", "r0", r1->session()), NewChannel(), n0);
  EXPECT_EQ(stale.status().code(), StatusCode::kAborted) << stale.status();
  // The current one reconnects with its own.
  EXPECT_TRUE(c_->Register(Reg("w0", "n0", "r0", r2->session()), NewChannel(), n0).ok());
}

TEST_F(NodeIdentityTest, DeleteNodeRevokesItsCredentialClosesItsStreamsAndForgetsItsWorkers) {
  const WorkerIdentity n0 = Boot("n0", "r0");
  Channel* ch = NewChannel();
  ASSERT_TRUE(c_->Register(Reg("w0", "n0", "r0"), ch, n0).ok());
  auto del = c_->DeleteNode("n0", "ops");
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_TRUE(del->credential_revoked());
  EXPECT_EQ(del->count(), 1);
  EXPECT_NE(ch->closed.find("deleted by ops"), std::string::npos) << ch->closed;
  auto found = c_->node_credentials().Find(credentials_["n0"]);
  ASSERT_TRUE(found.has_value()) << "the revoked record is kept, so its agent is told";
  EXPECT_GT(found->revoked_at(), 0);
  EXPECT_TRUE(c_->Workers().empty());
  EXPECT_EQ(c_->DeleteNode("n0", "ops").status().code(), StatusCode::kNotFound);
  Boot("n0", "r0");  // a fresh agent of the node may bootstrap again
}

TEST_F(NodeIdentityTest, ANodesCredentialIsDroppedWhenItsLastWorkerLeavesCleanly) {
  const WorkerIdentity n0 = Boot("n0", "r0");
  Channel* ch = NewChannel();
  ASSERT_TRUE(c_->Register(Reg("w0", "n0", "r0"), ch, n0).ok());
  moe::v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("SIGTERM to moe-worker");
  ASSERT_TRUE(c_->OnWorkerMessage("w0", leaving).ok());
  c_->Disconnected("w0", ch);
  EXPECT_FALSE(c_->node_credentials().Find(credentials_["n0"]).has_value());
  Boot("n0", "r0");
}

TEST_F(NodeIdentityTest, LostWorkersCountTowardNoLimitAndANodesOwnMakeRoom) {
  config_.max_workers = 2;
  config_.max_devices_per_node = 2;
  Make();
  const WorkerIdentity n0 = Boot("n0", "r0"), n1 = Boot("n1", "r0");
  // n0 registers, and drops, names over and over: its lost ones are forgotten to make room.
  for (int i = 0; i < 6; ++i) {
    Channel* ch = NewChannel();
    const std::string name = "w" + std::to_string(i);
    auto r = c_->Register(Reg(name, "n0", "r0"), ch, n0);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    c_->Disconnected(name, ch);
    clock_.t += 1;
  }
  EXPECT_EQ(c_->Workers().size(), 2u) << "n0's lost workers past its limit stay";
  // Lost ones count toward no limit: n1 registers two live ones under --max-workers 2.
  ASSERT_TRUE(c_->Register(Reg("x0", "n1", "r0"), NewChannel(), n1).ok());
  ASSERT_TRUE(c_->Register(Reg("x1", "n1", "r0"), NewChannel(), n1).ok());
  // Live ones do count: a third is refused.
  const WorkerIdentity n2 = Boot("n2", "r0");
  EXPECT_EQ(c_->Register(Reg("y0", "n2", "r0"), NewChannel(), n2).status().code(),
            StatusCode::kResourceExhausted);
  // n1's live workers are not forgotten for room: n1 is full.
  EXPECT_EQ(c_->Register(Reg("x2", "n1", "r0"), NewChannel(), n1).status().code(),
            StatusCode::kResourceExhausted);
  // Bulk pruning of the lost.
  auto pruned = c_->DeleteWorkers(moe::v1::LOST, "ops");
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_EQ(pruned->count(), 2);
  EXPECT_EQ(c_->Workers().size(), 2u);
  EXPECT_EQ(c_->DeleteWorkers(moe::v1::IDLE, "ops").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NodeIdentityTest, BootstrapsAreBoundedByMaxNodes) {
  config_.max_nodes = 2;
  Make();
  Boot("n0", "r0");
  Boot("n1", "r0");
  moe::v1::BootstrapRequest req;
  req.set_node("n2");
  req.set_rack("r0");
  EXPECT_EQ(c_->Bootstrap(req, "fleet").status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace moe::controller
