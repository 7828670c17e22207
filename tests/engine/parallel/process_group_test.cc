// ProcessGroups for W = PP x DP x EP (Megatron's order: EP innermost, then DP, then PP): the layout
// by hand for a few ranks, then real Gloo groups at W = 8 (PP 2, DP 4, EP 2) where every rank
// all-gathers its global rank through each of its groups and checks the members against the groups'
// definitions (a filter over all ranks, written apart from the layout code); at PP 1 the old
// groups.
#include "worker/engine/parallel/process_group.h"

#include <gtest/gtest.h>

#include <functional>

#include "tests/testing/ranks.h"
#include "worker/engine/parallel/local_communicator.h"

namespace moe::parallel {
namespace {

using Members = std::vector<int>;

TEST(LayoutGroups, EightRanksTwoStagesEpTwoByHand) {
  // Rank 5: stage 1, dp index 1, member 1 of EP group {4, 5}.
  auto five = LayoutGroups(8, 5, /*pipeline_parallel=*/2, /*expert_parallel=*/2);
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_EQ(five->world.members, (Members{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(five->dp.members, (Members{4, 5, 6, 7}));
  EXPECT_EQ(five->ep.members, (Members{4, 5}));
  EXPECT_EQ(five->expert_dp.members, (Members{5, 7}));
  EXPECT_EQ(five->pipeline.members, (Members{1, 5}));
  ASSERT_TRUE(five->embedding.has_value());
  EXPECT_EQ(five->embedding->members, (Members{1, 5}));
  // Rank 2: stage 0, dp index 2.
  auto two = LayoutGroups(8, 2, 2, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->dp.members, (Members{0, 1, 2, 3}));
  EXPECT_EQ(two->ep.members, (Members{2, 3}));
  EXPECT_EQ(two->expert_dp.members, (Members{0, 2}));
  EXPECT_EQ(two->pipeline.members, (Members{2, 6}));
  // Keys tell groups of one kind apart across stages.
  EXPECT_NE(two->dp.key, five->dp.key);
  EXPECT_NE(LayoutGroups(8, 1, 2, 2)->expert_dp.key, five->expert_dp.key);
}

TEST(LayoutGroups, MiddleStagesHaveNoEmbeddingGroupAndOneStageHasAGroupOfOne) {
  auto middle = LayoutGroups(12, 6, 3, 2);  // DP 4: stage 1
  ASSERT_TRUE(middle.ok());
  EXPECT_FALSE(middle->embedding.has_value());
  EXPECT_EQ(middle->pipeline.members, (Members{2, 6, 10}));
  auto last = LayoutGroups(12, 9, 3, 2);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->embedding->members, (Members{1, 9}));
  auto flat = LayoutGroups(4, 3, 1, 2);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->embedding->members, (Members{3}));
  EXPECT_EQ(flat->pipeline.members, (Members{3}));
}

TEST(LayoutGroups, LayoutsThatDoNotDivideAreRefusedNamingTheArgument) {
  auto pp = LayoutGroups(8, 0, 3, 1);
  EXPECT_EQ(pp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pp.status().message().find("pipeline_parallel 3 does not divide world size 8"),
            std::string::npos);
  auto ep = LayoutGroups(8, 0, 2, 3);
  EXPECT_NE(
      ep.status().message().find("expert_parallel 3 does not divide the data-parallel size 4"),
      std::string::npos)
      << ep.status();
  EXPECT_EQ(LayoutGroups(8, 8, 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProcessGroups::Create(8, 0, 0, 1, nullptr, GroupOptions()).status().code(),
            StatusCode::kInvalidArgument);
}

// The ranks q of the world that share a group with r, by the group's definition.
Members Filter(int world, const std::function<bool(int)>& same) {
  Members m;
  for (int q = 0; q < world; ++q) {
    if (same(q)) m.push_back(q);
  }
  return m;
}

// Gathers each member's global rank through `comm` (both gathers: host bytes and a tensor).
void ExpectMembers(Communicator* comm, int rank, const Members& want, const std::string& what) {
  ASSERT_NE(comm, nullptr) << what;
  ASSERT_EQ(comm->size(), static_cast<int>(want.size())) << what << " of rank " << rank;
  std::vector<int64_t> got(want.size());
  const int64_t mine = rank;
  Status st = comm->AllGatherHost(&mine, got.data(), sizeof(mine));
  ASSERT_TRUE(st.ok()) << what << ": " << st;
  EXPECT_EQ(Members(got.begin(), got.end()), want) << what << " of rank " << rank;
  EXPECT_EQ(want[static_cast<size_t>(comm->rank())], rank)
      << what << ": group rank " << comm->rank();
  Tensor t = Tensor::Zeros({static_cast<int64_t>(want.size())}, DType::kI64);
  t.data<int64_t>()[comm->rank()] = rank;
  st = comm->AllGather(t, std::vector<int64_t>(want.size(), 1));
  ASSERT_TRUE(st.ok()) << what << ": " << st;
  EXPECT_EQ(t.ToVector<int64_t>(), std::vector<int64_t>(want.begin(), want.end()))
      << what << " of rank " << rank;
}

// Every rank builds its groups over Gloo and checks each one's members and its own place in it.
void CheckGroups(int world, int pp, int ep) {
  const int dp = world / pp;
  moe::testing::RunRanks(world, [&](int r, KvStore* store) {
    auto groups = ProcessGroups::Create(world, r, pp, ep, store, GroupOptions());
    ASSERT_TRUE(groups.ok()) << groups.status();
    const ParallelContext& c = (*groups)->ctx();
    EXPECT_EQ(c.pp_rank(), r / dp);
    EXPECT_EQ(c.dp_rank(), r % dp);
    EXPECT_EQ(c.dp_size(), dp);
    EXPECT_EQ(c.ep_rank(), r % ep);
    EXPECT_EQ(c.expert_dp_size(), dp / ep);
    const auto stage = [dp](int q) { return q / dp; };
    ExpectMembers(c.world, r, Filter(world, [](int) { return true; }), "world");
    ExpectMembers(c.dp_group, r, Filter(world, [&](int q) { return stage(q) == stage(r); }),
                  "dp_group");
    ExpectMembers(c.ep_group, r, Filter(world, [&](int q) { return q / ep == r / ep; }),
                  "ep_group");
    ExpectMembers(c.expert_dp, r,
                  Filter(world, [&](int q) { return stage(q) == stage(r) && q % ep == r % ep; }),
                  "expert_dp");
    ExpectMembers(c.pipeline, r, Filter(world, [&](int q) { return q % dp == r % dp; }),
                  "pipeline");
    EXPECT_EQ(c.dp_group->rank(), c.dp_rank());
    EXPECT_EQ(c.expert_dp->rank(), c.expert_dp_rank());
    EXPECT_EQ(c.pipeline->rank(), c.pp_rank());
    const auto end_stage = [&](int q) { return stage(q) == 0 || stage(q) == pp - 1; };
    if (!end_stage(r)) {
      EXPECT_EQ(c.embedding, nullptr) << "rank " << r << " is on a middle stage";
    } else {
      ExpectMembers(c.embedding, r,
                    Filter(world, [&](int q) { return q % dp == r % dp && end_stage(q); }),
                    "embedding");
    }
  });
}

TEST(ProcessGroups, EightRanksTwoStagesDataParallelFourExpertParallelTwo) { CheckGroups(8, 2, 2); }

TEST(ProcessGroups, OneStageKeepsTheOldGroups) {
  // W = 4, EP 2: the EP groups are {0, 1} and {2, 3}, expert-DP {0, 2} and {1, 3}, as before
  // pipelines.
  CheckGroups(4, 1, 2);
  moe::testing::RunRanks(4, [&](int r, KvStore* store) {
    auto groups = ProcessGroups::Create(4, r, 1, 2, store, GroupOptions());
    ASSERT_TRUE(groups.ok()) << groups.status();
    const ParallelContext& c = (*groups)->ctx();
    EXPECT_NE(c.dp_group, c.world)
        << "the gradients' group has a communicator of its own, though its members are the world";
    EXPECT_EQ(c.dp_group->size(), 4);
    EXPECT_NE(c.expert_dp, c.ep_group);
    EXPECT_EQ(c.pipeline->size(), 1);
    EXPECT_EQ(c.pipeline->backend(), "local");
    EXPECT_EQ(c.ep_group_index(), r / 2);
    EXPECT_EQ(c.expert_dp_rank(), r / 2);
  });
}

TEST(ProcessGroups, OneRankGetsLocalGroupsWithoutAStore) {
  auto groups = ProcessGroups::Create(1, 0, 1, 1, nullptr, GroupOptions());
  ASSERT_TRUE(groups.ok()) << groups.status();
  const ParallelContext& c = (*groups)->ctx();
  for (Communicator* comm :
       {c.world, c.dp_group, c.ep_group, c.expert_dp, c.pipeline, c.embedding}) {
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(comm->backend(), "local");
  }
  LocalParallel local;
  EXPECT_EQ(local.ctx.dp_size(), 1);
  EXPECT_EQ(local.ctx.expert_dp_size(), 1);
  EXPECT_NE(local.ctx.embedding, nullptr);
}

TEST(ProcessGroups, GradientGroupsNeverShareTheAllToAllsCommunicator) {
  // W = 2, EP 2: world, dp_group and ep_group have the same two members. The gradients' reductions
  // overlap the backward's all-to-alls, so dp_group is not the all-to-all's communicator; expert_dp
  // is a group of one here.
  moe::testing::RunRanks(2, [&](int r, KvStore* store) {
    auto groups = ProcessGroups::Create(2, r, 1, 2, store, GroupOptions());
    ASSERT_TRUE(groups.ok()) << groups.status();
    const ParallelContext& c = (*groups)->ctx();
    EXPECT_EQ(c.ep_group, c.world) << "the same members and kind share one communicator";
    EXPECT_NE(c.dp_group, c.ep_group);
    EXPECT_EQ(c.dp_group->size(), 2);
    EXPECT_EQ(c.expert_dp->backend(), "local");
    double x = r + 1;  // both work
    ASSERT_TRUE(c.dp_group->AllReduceSumHost(&x, 1).ok());
    ASSERT_TRUE(c.ep_group->AllReduceSumHost(&x, 1).ok());
    EXPECT_EQ(x, 6.0);
  });
}

}  // namespace
}  // namespace moe::parallel
