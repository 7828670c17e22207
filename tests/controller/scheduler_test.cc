// Scheduler properties on random clusters: gang all-or-nothing, EP groups inside their domain, no
// double booking, packing, refill of lost slots, priorities.
#include "controller/scheduler.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>

#include "common/rng.h"

namespace moe::controller {
namespace {

std::vector<Slot> RandomCluster(Rng& rng, int racks, int max_nodes, int max_devices, bool gpus) {
  std::vector<Slot> out;
  for (int r = 0; r < racks; ++r) {
    const int nodes = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(max_nodes)));
    for (int n = 0; n < nodes; ++n) {
      const int devices = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(max_devices)));
      for (int d = 0; d < devices; ++d) {
        const std::string node = "r" + std::to_string(r) + "n" + std::to_string(n);
        out.push_back({node + "-" + std::to_string(d), "rack" + std::to_string(r), node,
                       gpus ? "cuda:" + std::to_string(d) : "cpu"});
      }
    }
  }
  return out;
}

std::string Domain(const Slot& s, const std::string& within) {
  return within == "rack" ? s.rack : within == "node" ? s.rack + "/" + s.node : "";
}

TEST(Scheduler, PropertiesHoldOnRandomClusters) {
  Rng rng(2026);
  int placed = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const bool gpus = rng.Below(2) == 0;
    std::vector<Slot> cluster = RandomCluster(rng, 1 + static_cast<int>(rng.Below(6)), 4, 8, gpus);
    // Some workers are busy.
    std::vector<Slot> free;
    for (const auto& s : cluster)
      if (rng.Below(4) != 0) free.push_back(s);
    PlacementRequest req;
    req.expert_parallel = 1 << rng.Below(4);  // 1..8
    req.world_size = req.expert_parallel * static_cast<int>(1 + rng.Below(6));
    const char* within[] = {"rack", "node", "any"};
    req.within = within[rng.Below(3)];
    req.device_type = rng.Below(5) == 0 ? (gpus ? "cpu" : "cuda") : (gpus ? "cuda" : "cpu");
    auto out = Place(req, free);
    if (!out.ok()) {
      ++refused;
      EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status();
      // Gang: a refusal is right only if no valid placement exists; check capacity per domain.
      std::map<std::string, int> per_domain;
      int matching = 0;
      for (const auto& s : free) {
        if (!DeviceMatches(s.device, req.device_type)) continue;
        ++matching;
        per_domain[Domain(s, req.within)]++;
      }
      int groups = 0;
      for (const auto& [d, n] : per_domain) groups += n / req.expert_parallel;
      EXPECT_LT(groups, req.world_size / req.expert_parallel)
          << "refused although the groups fit (" << req.within << ")";
      continue;
    }
    ++placed;
    ASSERT_EQ(static_cast<int>(out->size()), req.world_size) << "gang: all ranks or none";
    std::set<std::string> used, free_names;
    for (const auto& s : free) free_names.insert(s.worker);
    for (const auto& s : *out) {
      EXPECT_TRUE(used.insert(s.worker).second) << "worker " << s.worker << " booked twice";
      EXPECT_TRUE(free_names.count(s.worker)) << "busy worker " << s.worker << " placed";
      EXPECT_TRUE(DeviceMatches(s.device, req.device_type))
          << s.device << " for " << req.device_type;
    }
    // Each EP group (consecutive ranks) inside one domain.
    for (int g = 0; g < req.world_size; g += req.expert_parallel) {
      for (int r = g; r < g + req.expert_parallel; ++r) {
        EXPECT_EQ(Domain((*out)[static_cast<size_t>(r)], req.within),
                  Domain((*out)[static_cast<size_t>(g)], req.within))
            << "EP group " << g / req.expert_parallel << " spans " << req.within << "s";
      }
    }
    // Ranks ordered by (rack, node) across the job.
    for (size_t r = 1; r < out->size(); ++r) {
      const auto& a = (*out)[r - 1];
      const auto& b = (*out)[r];
      EXPECT_LE(std::make_pair(a.rack, a.node), std::make_pair(b.rack, b.node))
          << "rank order at " << r;
    }
    // Whatever was placed now is feasible on the whole cluster.
    EXPECT_TRUE(CheckFeasible(req, cluster).ok());
  }
  EXPECT_GT(placed, 300);
  EXPECT_GT(refused, 100);
}

TEST(Scheduler, PacksIntoTheSmallestRackThatFits) {
  std::vector<Slot> free;
  for (int i = 0; i < 8; ++i) free.push_back({"big" + std::to_string(i), "big", "bn", "cpu"});
  for (int i = 0; i < 4; ++i) free.push_back({"small" + std::to_string(i), "small", "sn", "cpu"});
  PlacementRequest req{.world_size = 4, .expert_parallel = 2, .within = "rack"};
  auto out = Place(req, free);
  ASSERT_TRUE(out.ok());
  for (const auto& s : *out) EXPECT_EQ(s.rack, "small") << "best fit leaves the big rack whole";
  // Too big for any one rack: the fewest racks, largest first.
  req.world_size = 12;
  out = Place(req, free);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->size(), 12u);
}

TEST(Scheduler, RefillKeepsSurvivorsAndReplacesOnlyTheLostSlotInsideItsRack) {
  std::vector<Slot> previous = {{"a0", "r0", "n0", "cpu"},
                                {"a1", "r0", "n1", "cpu"},
                                {"b0", "r1", "m0", "cpu"},
                                {"b1", "r1", "m1", "cpu"}};
  // a1 is gone; a spare sits in r0 and another in r1.
  std::vector<Slot> free = {{"a0", "r0", "n0", "cpu"},
                            {"b0", "r1", "m0", "cpu"},
                            {"b1", "r1", "m1", "cpu"},
                            {"spare-r1", "r1", "m2", "cpu"},
                            {"spare-r0", "r0", "n2", "cpu"}};
  PlacementRequest req{.world_size = 4,
                       .expert_parallel = 2,
                       .within = "rack",
                       .device_type = "cpu",
                       .previous = previous};
  auto out = Place(req, free);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].worker, "a0");
  EXPECT_EQ((*out)[1].worker, "spare-r0")
      << "the lost rank's replacement comes from its group's rack";
  EXPECT_EQ((*out)[2].worker, "b0");
  EXPECT_EQ((*out)[3].worker, "b1");
  // No spare in r0: the job is placed afresh rather than split across racks.
  free.pop_back();
  free.push_back({"spare2-r1", "r1", "m3", "cpu"});
  out = Place(req, free);
  ASSERT_TRUE(out.ok());
  for (int g = 0; g < 4; g += 2)
    EXPECT_EQ((*out)[static_cast<size_t>(g)].rack, (*out)[static_cast<size_t>(g) + 1].rack);
}

// --spares-per-rack 1 on a rack of 4: a fresh job sees 3 slots; a restart that lost a worker
// (spares_per_rack 0 in its request) takes the held-back one, in its group's rack.
TEST(Scheduler, SparesAreHeldBackFromFreshJobsAndRefillARestartInItsRack) {
  std::vector<Slot> rack = {{"a0", "r0", "n0", "cpu"},
                            {"a1", "r0", "n1", "cpu"},
                            {"a2", "r0", "n2", "cpu"},
                            {"a3", "r0", "n3", "cpu"}};
  PlacementRequest req{.world_size = 4, .expert_parallel = 4, .within = "rack"};
  req.spares_per_rack = 1;
  auto out = Place(req, rack);
  ASSERT_FALSE(out.ok()) << "4 ranks in one rack of 4 with one held back";
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.status().message().find("--spares-per-rack"), std::string::npos) << out.status();
  Status never = CheckFeasible(req, rack);
  EXPECT_EQ(never.code(), StatusCode::kFailedPrecondition) << "not even on every live worker";
  EXPECT_NE(never.message().find("held back as spares"), std::string::npos) << never;
  req.spares_per_rack = 0;
  EXPECT_TRUE(Place(req, rack).ok()) << "without spares it fits";

  req = {.world_size = 3, .expert_parallel = 3, .within = "rack"};
  req.spares_per_rack = 1;
  EXPECT_TRUE(CheckFeasible(req, rack).ok());
  out = Place(req, rack);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ((*out)[r].worker, rack[r].worker);
  // Held back per rack and per device type: another rack's slots, or GPUs, are not touched.
  std::vector<Slot> more = rack;
  more.push_back({"g0", "r0", "n0", "cuda:0"});
  more.push_back({"b0", "r1", "m0", "cpu"});
  const std::vector<Slot> unheld = WithoutSpares(req, more);
  std::set<std::string> left;
  for (const Slot& s : unheld) left.insert(s.worker);
  EXPECT_EQ(left, (std::set<std::string>{"a0", "a1", "a2", "g0"}))
      << "a3 is r0's spare, b0 r1's (its only cpu slot)";

  // The job runs on a0..a2; a1 is lost. Its restart may use the spare a3, in the same rack, while
  // a fresh rack r1 of 4 idle workers stands by: the group does not move.
  for (int i = 0; i < 4; ++i)
    rack.push_back({"b" + std::to_string(i), "r1", "m" + std::to_string(i), "cpu"});
  PlacementRequest restart{.world_size = 3,
                           .expert_parallel = 3,
                           .within = "rack",
                           .device_type = "cpu",
                           .previous = {rack[0], rack[1], rack[2]}};
  std::vector<Slot> free = rack;
  free.erase(free.begin() + 1);  // a1 lost
  out = Place(restart, free);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].worker, "a0");
  EXPECT_EQ((*out)[1].worker, "a3") << "the lost rank takes its rack's spare";
  EXPECT_EQ((*out)[2].worker, "a2");
  // The same request held to the spares (a fresh job) cannot stay in r0: it moves to r1.
  restart.spares_per_rack = 1;
  out = Place(restart, free);
  ASSERT_TRUE(out.ok()) << out.status();
  for (const Slot& s : *out) EXPECT_EQ(s.rack, "r1");
}

// within=any: a lost rank's replacement is on its node if one is free there, else in its rack.
TEST(Scheduler, RefillPrefersTheLostSlotsRackWhenTheGroupMayGoAnywhere) {
  std::vector<Slot> previous = {{"a0", "r1", "n0", "cpu"}, {"a1", "r1", "n1", "cpu"}};
  std::vector<Slot> free = {{"a0", "r1", "n0", "cpu"},
                            {"x0", "r0", "x0", "cpu"},  // first in rank order
                            {"a2", "r1", "n2", "cpu"}};
  PlacementRequest req{.world_size = 2,
                       .expert_parallel = 2,
                       .within = "any",
                       .device_type = "cpu",
                       .previous = previous};
  auto out = Place(req, free);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].worker, "a0");
  EXPECT_EQ((*out)[1].worker, "a2") << "same rack before another rack's first slot";
}

TEST(Scheduler, InfeasibleJobsAreRecognised) {
  std::vector<Slot> all = {
      {"a", "r0", "n0", "cpu"}, {"b", "r0", "n0", "cpu"}, {"c", "r1", "n1", "cpu"}};
  PlacementRequest req{.world_size = 4, .expert_parallel = 1, .within = "any"};
  Status st = CheckFeasible(req, all);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("needs 4 cpu workers and the cluster has 3"), std::string::npos)
      << st;
  req = {.world_size = 2, .expert_parallel = 2, .within = "node"};
  EXPECT_TRUE(CheckFeasible(req, all).ok());
  all.push_back({"d", "r1", "n2", "cpu"});
  req = {.world_size = 4, .expert_parallel = 2, .within = "node"};
  st = CheckFeasible(req, all);
  EXPECT_NE(st.message().find("inside one node"), std::string::npos) << st;
  req = {.world_size = 1, .expert_parallel = 1, .within = "rack", .device_type = "cuda"};
  EXPECT_FALSE(CheckFeasible(req, all).ok());
}

TEST(Scheduler, QueueOrderIsPriorityThenSubmitTime) {
  auto q = QueueOrder(
      {{"late-high", 5, 30}, {"early-low", 0, 10}, {"early-high", 5, 20}, {"mid-low", 0, 15}});
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0].id, "early-high");
  EXPECT_EQ(q[1].id, "late-high");
  EXPECT_EQ(q[2].id, "early-low");
  EXPECT_EQ(q[3].id, "mid-low");
}

TEST(Scheduler, ExtremePrioritiesSortWithoutOverflow) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  auto q =
      QueueOrder({{"lowest", lo, 1}, {"highest", hi, 2}, {"zero", 0, 3}, {"minus-one", -1, 4}});
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0].id, "highest");
  EXPECT_EQ(q[1].id, "zero");
  EXPECT_EQ(q[2].id, "minus-one");
  EXPECT_EQ(q[3].id, "lowest") << "-2^63 sorts last, not first";
}

}  // namespace
}  // namespace moe::controller
