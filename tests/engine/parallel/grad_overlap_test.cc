// The data-parallel gradient reduction overlapped with the backward (Optimizer::SetOverlap,
// Model::ArmGradsFinal): the spans tile each bucket in whole parameters, a span's reduction starts
// during the step's last backward as soon as its blocks are done (never during an earlier
// micro-batch's backward, whose gradients are not final), ReduceGradients starts the rest in order
// and waits for all, and each reduce-scatter's per-rank counts are the ranks' shards within the
// span. The group is a recording fake of two ranks (this one is rank 0); the collectives' results
// are the real ones' in collectives_test and distributed_test.sh (the overlapped run equals the
// other bitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "common/job_spec.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/optimizer.h"

namespace moe::parallel {
namespace {

// A group of two that records the reductions started, and when (how many blocks had reported).
class RecordingGroup final : public Communicator {
 public:
  struct Start {
    const void* data;
    int64_t numel;
    std::vector<int64_t> counts;
    int blocks_done;
    bool waited = false;
  };
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "recording"; }
  Status AllReduceSum(const Tensor&) override { return Unexpected("AllReduceSum"); }
  Status AllReduceSumHost(double*, int64_t) override { return OkStatus(); }
  Status AllToAllV(const Tensor&, const std::vector<int64_t>&, const Tensor&,
                   const std::vector<int64_t>&) override {
    return Unexpected("AllToAllV");
  }
  Status AllToAllHost(const int64_t*, int64_t*, int64_t) override {
    return Unexpected("AllToAllHost");
  }
  Status AllGatherHost(const void*, void*, size_t) override { return OkStatus(); }
  Status BroadcastHost(void*, size_t, int) override { return OkStatus(); }
  Status Barrier() override { return OkStatus(); }
  Status ReduceScatterSum(const Tensor&, const std::vector<int64_t>&) override {
    return Unexpected("ReduceScatterSum");
  }
  Status AllGather(const Tensor&, const std::vector<int64_t>&) override { return OkStatus(); }
  Status Exchange(const std::vector<P2POp>&) override { return Unexpected("Exchange"); }
  Pending StartReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    starts.push_back({t.raw(), t.numel(), counts, blocks_done});
    return std::make_unique<Waited>(&starts.back().waited);
  }

  std::deque<Start> starts;
  int blocks_done = 0;

 private:
  struct Waited final : PendingCollective {
    explicit Waited(bool* w) : w_(w) {}
    Status Wait() override {
      *w_ = true;
      return OkStatus();
    }
    bool* w_;
  };
  Status Unexpected(const char* what) {
    ADD_FAILURE() << what << ": the spans use StartReduceScatterSum only";
    return InternalError(what);
  }
};

ModelConfig SmallConfig() {
  ModelConfig cfg = *ModelPreset("tiny");
  cfg.vocab_size = 61;
  cfg.hidden_size = 32;
  cfg.num_heads = 2;
  cfg.num_layers = 3;
  return cfg;
}

// A model and a ZeRO optimizer on rank 0 of DP 2 (EP 1): the dense and the expert buckets both
// reduce over `group`.
struct TwoRanks {
  static ParallelContext Context(const LocalParallel& local, RecordingGroup* group) {
    ParallelContext ctx = local.ctx;
    ctx.world_size = 2;
    ctx.dp_group = ctx.expert_dp = group;
    return ctx;
  }
  RecordingGroup group;
  LocalParallel local;
  ParallelContext ctx = Context(local, &group);
  model::Model model{SmallConfig(), ctx, 1, DType::kF32, Device::Cpu()};
  train::Optimizer opt{OptimizerConfig(), model.params(), ctx, /*distributed=*/true,
                       model.config().moe.num_experts};
};

TEST(GradOverlap, SpansStartDuringTheLastBackwardAndTileEachBucket) {
  TwoRanks two;
  RecordingGroup& group = two.group;
  model::Model& model = two.model;
  train::Optimizer& opt = two.opt;
  opt.SetOverlap(4096);
  ASSERT_GT(opt.overlap_spans(), 4);
  model::LossScales scales;
  scales.ce = 1.0 / 64;
  scales.aux_coeff = 1e-4;
  scales.mtp = {0.1 / 60};
  const int blocks = static_cast<int>(SmallConfig().num_layers);
  for (int step = 0; step < 2; ++step) {  // the second step: the spans reset by ZeroGrads
    opt.ZeroGrads();
    group.starts.clear();
    group.blocks_done = 0;
    model.ArmGradsFinal(2, [&](const std::vector<model::Param*>& ps) {
      ++group.blocks_done;
      opt.GradsFinal(ps);
    });
    Tensor tokens = Tensor::Zeros({2, 16}, DType::kI32),
           targets = Tensor::Zeros({2, 16}, DType::kI32);
    ASSERT_TRUE(model.ForwardBackward(tokens, targets, scales).ok());
    EXPECT_TRUE(group.starts.empty()) << "the first micro-batch's gradients are not final";
    EXPECT_EQ(group.blocks_done, 0);
    ASSERT_TRUE(model.ForwardBackward(tokens, targets, scales).ok());
    EXPECT_EQ(group.blocks_done, blocks) << "every block reports once, in the last backward";
    const size_t during = group.starts.size();
    ASSERT_GT(during, 0u) << "spans start during the backward";
    EXPECT_LT(group.starts.front().blocks_done, blocks)
        << "the first span starts before the backward ends";
    model.ArmGradsFinal(0, nullptr);
    ASSERT_TRUE(opt.ReduceGradients().ok());
    EXPECT_EQ(static_cast<int64_t>(group.starts.size()), opt.overlap_spans())
        << "each span started once";
    EXPECT_GT(group.starts.size(), during)
        << "the embedding's and head's spans start at ReduceGradients";
    for (const auto& s : group.starts)
      EXPECT_TRUE(s.waited) << "ReduceGradients waits for every span";
  }
  // The spans tile the two buffers: group the starts by buffer (the dense and the expert
  // gradients).
  std::vector<const model::Param*> dense, experts;
  for (const auto& p : model.params().all()) (p->expert ? experts : dense).push_back(p.get());
  for (const auto* params : {&dense, &experts}) {
    const char* base = static_cast<const char*>(params->front()->grad.raw());
    int64_t numel = 0;
    for (const model::Param* p : *params) numel += p->grad.numel();
    numel = (numel + 1) / 2 * 2;  // padded to the group of two
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& s : group.starts) {
      const int64_t begin =
          (static_cast<const char*>(s.data) - base) / static_cast<int64_t>(sizeof(float));
      if (begin < 0 || begin >= numel) continue;
      ranges.push_back({begin, begin + s.numel});
      // Rank r's share: its shard [r n/2, (r+1) n/2) within the span.
      for (int r = 0; r < 2; ++r) {
        const int64_t lo = std::max(begin, r * numel / 2),
                      hi = std::min(begin + s.numel, (r + 1) * numel / 2);
        EXPECT_EQ(s.counts[static_cast<size_t>(r)], std::max<int64_t>(0, hi - lo))
            << "span at " << begin << " rank " << r;
      }
      bool at_param = begin == 0;
      for (const model::Param* p : *params)
        at_param =
            at_param || static_cast<const char*>(p->grad.raw()) == static_cast<const char*>(s.data);
      EXPECT_TRUE(at_param) << "span at " << begin << " starts at a parameter";
    }
    std::sort(ranges.begin(), ranges.end());
    ASSERT_FALSE(ranges.empty());
    EXPECT_EQ(ranges.front().first, 0);
    EXPECT_EQ(ranges.back().second, numel) << "the padding goes with the last span";
    for (size_t i = 1; i < ranges.size(); ++i)
      EXPECT_EQ(ranges[i].first, ranges[i - 1].second) << "no gap, no overlap";
    for (size_t i = 0; i + 1 < ranges.size(); ++i)
      EXPECT_GE((ranges[i].second - ranges[i].first) * 4, 4096) << "span " << i;
  }
}

TEST(GradOverlap, WithoutOverlapOrWithAGroupOfOneThereAreNoSpans) {
  TwoRanks two;
  two.opt.SetOverlap(0);
  EXPECT_EQ(two.opt.overlap_spans(), 0);
  LocalParallel one;
  model::Model alone(SmallConfig(), one.ctx, 1, DType::kF32, Device::Cpu());
  train::Optimizer opt1(OptimizerConfig(), alone.params(), one.ctx, /*distributed=*/false,
                        alone.config().moe.num_experts);
  opt1.SetOverlap(4096);
  EXPECT_EQ(opt1.overlap_spans(), 0) << "a group of one reduces nothing";
}

}  // namespace
}  // namespace moe::parallel
