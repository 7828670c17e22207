// The issue order of collectives across a rank's communicators. NCCL's rule for communicators used
// at once ("Using multiple NCCL communicators concurrently"): every rank issues their operations in
// the same order, and the device launches them in that order (nccl_comm.cc: NCCL 2.26's
// NCCL_LAUNCH_ORDER_IMPLICIT, else one stream for all). Here two ranks (threads over Gloo, EP = 2)
// train a small MoE model with the gradient reduction overlapped (its own communicator, started
// during the backward) beside the expert all-to-alls; every communicator of each rank is wrapped in
// a recorder that logs (group, operation, elements) in issue order, and the two ranks' logs must be
// equal, with both kinds of collective in them. ChooseNcclLaunchOrder, which picks the device
// order, is checked on its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "tests/engine/train_helpers.h"
#include "tests/testing/ranks.h"
#include "worker/engine/parallel/nccl_wait.h"
#include "worker/engine/parallel/process_group.h"
#include "worker/engine/train/trainer.h"

namespace moe::parallel {
namespace {

// Forwards every call to `inner` and appends "<group> <op> <elements>" to `log` as it is issued.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(Communicator* inner, std::string group, std::vector<std::string>* log)
      : inner_(inner), group_(std::move(group)), log_(log) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }

  Status AllReduceSum(const Tensor& t) override {
    Note("all_reduce", t.numel());
    return inner_->AllReduceSum(t);
  }
  Status AllReduceSumHost(double* data, int64_t n) override {
    Note("all_reduce_host", n);
    return inner_->AllReduceSumHost(data, n);
  }
  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override {
    Note("all_to_all_v", -1);  // the rows differ between ranks; the op and its place do not
    return inner_->AllToAllV(send, send_rows, recv, recv_rows);
  }
  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n) override {
    Note("all_to_all_host", n);
    return inner_->AllToAllHost(send, recv, n);
  }
  Status AllGatherHost(const void* send, void* recv, size_t bytes) override {
    Note("all_gather_host", static_cast<int64_t>(bytes));
    return inner_->AllGatherHost(send, recv, bytes);
  }
  Status BroadcastHost(void* data, size_t bytes, int root) override {
    Note("broadcast_host", static_cast<int64_t>(bytes));
    return inner_->BroadcastHost(data, bytes, root);
  }
  Status Barrier() override {
    Note("barrier", 0);
    return inner_->Barrier();
  }
  Status ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    Note("reduce_scatter", t.numel());
    return inner_->ReduceScatterSum(t, counts);
  }
  Status AllGather(const Tensor& t, const std::vector<int64_t>& counts) override {
    Note("all_gather", t.numel());
    return inner_->AllGather(t, counts);
  }
  Status Exchange(const std::vector<P2POp>& ops) override {
    Note("exchange", static_cast<int64_t>(ops.size()));
    return inner_->Exchange(ops);
  }
  Pending StartAllReduceSum(const Tensor& t) override {
    Note("start_all_reduce", t.numel());
    return inner_->StartAllReduceSum(t);
  }
  Pending StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                         const Tensor& recv, const std::vector<int64_t>& recv_rows) override {
    Note("start_all_to_all_v", -1);
    return inner_->StartAllToAllV(send, send_rows, recv, recv_rows);
  }
  Pending StartReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    Note("start_reduce_scatter", t.numel());
    return inner_->StartReduceScatterSum(t, counts);
  }

 private:
  void Note(const char* op, int64_t n) {
    inner_->SetPhase(phase());
    log_->push_back(group_ + " " + op + " " + std::to_string(n));
  }
  Communicator* inner_;
  std::string group_;
  std::vector<std::string>* log_;
};

// The rank's context with each distinct communicator wrapped once (PP = 1 may make the world and
// the EP group one communicator: one recorder, named by every role it plays).
struct Recorded {
  ParallelContext ctx;
  std::vector<std::unique_ptr<RecordingCommunicator>> wrappers;
  std::vector<std::string> log;
};
void Wrap(const ParallelContext& in, Recorded* out) {
  out->ctx = in;
  std::map<Communicator*, std::string> names;
  const std::pair<Communicator * ParallelContext::*, const char*> roles[] = {
      {&ParallelContext::world, "world"},       {&ParallelContext::dp_group, "dp"},
      {&ParallelContext::ep_group, "ep"},       {&ParallelContext::expert_dp, "expert_dp"},
      {&ParallelContext::pipeline, "pipeline"}, {&ParallelContext::embedding, "embedding"}};
  for (const auto& [member, name] : roles)
    if (Communicator* c = in.*member; c != nullptr)
      names[c] += (names[c].empty() ? "" : "+") + std::string(name);
  std::map<Communicator*, Communicator*> wrapped;
  for (const auto& [c, name] : names) {
    out->wrappers.push_back(std::make_unique<RecordingCommunicator>(c, name, &out->log));
    wrapped[c] = out->wrappers.back().get();
  }
  for (const auto& [member, name] : roles)
    if (Communicator* c = in.*member; c != nullptr) out->ctx.*member = wrapped[c];
}

TEST(CollectiveOrder, TwoRanksIssueTheSameCollectivesInTheSameOrderAcrossCommunicators) {
  const std::string dir = "/tmp/moe-collective-order-" + std::to_string(::getpid());
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string data = testing::MakeMarkovDataset(dir + "/markov", 61, 20000, 7);
  JobSpec spec = testing::SmallJob(data, 61);
  spec.training.steps = 3;
  spec.parallelism.world_size = 2;
  spec.parallelism.expert_parallel = 2;
  spec.parallelism.grad_bucket_mb = 0.001;  // many small buckets: reductions start mid-backward
  std::vector<std::string> logs[2];
  std::mutex mu;
  testing::RunRanks(2, [&](int r, KvStore* store) {
    GroupOptions go;
    go.timeout_seconds = 60;
    auto groups = ProcessGroups::Create(2, r, 1, 2, store, go);
    ASSERT_TRUE(groups.ok()) << groups.status();
    Recorded rec;
    Wrap((*groups)->ctx(), &rec);
    train::TrainerOptions o;
    o.peak_flops = 1e11;
    o.log_steps = false;
    auto result = train::Train(spec, rec.ctx, o);
    ASSERT_TRUE(result.ok()) << "rank " << r << ": " << result.status();
    std::lock_guard<std::mutex> lock(mu);
    logs[r] = rec.log;
  });
  ASSERT_FALSE(logs[0].empty());
  ASSERT_EQ(logs[0].size(), logs[1].size()) << "the ranks issued different numbers of collectives";
  for (size_t i = 0; i < logs[0].size(); ++i)
    ASSERT_EQ(logs[0][i], logs[1][i]) << "the ranks' issue orders part at collective " << i;
  // Both communicators of the overlap are in the log: the expert all-to-alls and the gradient
  // reductions started during the backward, on different communicators, interleaved.
  int a2a = 0, grad = 0, switches = 0;
  std::string last_group;
  for (const std::string& e : logs[0]) {
    const std::string group = e.substr(0, e.find(' '));
    a2a += e.find("all_to_all_v") != std::string::npos;
    grad += e.find("start_reduce_scatter") != std::string::npos ||
            e.find("start_all_reduce") != std::string::npos;
    switches += !last_group.empty() && group != last_group;
    last_group = group;
  }
  EXPECT_GT(a2a, 0) << "no expert all-to-all was issued";
  EXPECT_GT(grad, 0) << "no gradient reduction was started";
  EXPECT_GT(switches, 2) << "the collectives did not alternate between communicators";
  std::printf(
      "%zu collectives per rank, the same order on both; %d all-to-alls, %d started "
      "reductions, %d switches between communicators\n",
      logs[0].size(), a2a, grad, switches);
  (void)RemoveAll(dir);
}

TEST(CollectiveOrder, LaunchOrderImplicitFromNccl226UnlessTheUserTurnedItOff) {
  EXPECT_EQ(ChooseNcclLaunchOrder(22809, nullptr), NcclLaunchOrder::kImplicit);
  EXPECT_EQ(ChooseNcclLaunchOrder(22600, nullptr), NcclLaunchOrder::kImplicit);
  EXPECT_EQ(ChooseNcclLaunchOrder(22600, "1"), NcclLaunchOrder::kImplicit);
  EXPECT_EQ(ChooseNcclLaunchOrder(22600, "0"), NcclLaunchOrder::kSharedStream);
  EXPECT_EQ(ChooseNcclLaunchOrder(22507, nullptr), NcclLaunchOrder::kSharedStream);
  EXPECT_EQ(ChooseNcclLaunchOrder(0, nullptr), NcclLaunchOrder::kSharedStream);
}

}  // namespace
}  // namespace moe::parallel
