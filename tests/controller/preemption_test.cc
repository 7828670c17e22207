// ChooseVictims on snapshots: the order victims are taken in, fill-back, quotas and reclaim.
#include "controller/preemption.h"

#include <gtest/gtest.h>

namespace moe::controller {
namespace {

std::vector<Slot> Slots(const std::string& prefix, const std::string& rack, int n) {
  std::vector<Slot> out;
  for (int i = 0; i < n; ++i)
    out.push_back({prefix + std::to_string(i), rack, prefix + "-node" + std::to_string(i), "cpu"});
  return out;
}

VictimCandidate Running(const std::string& id, int64_t priority, std::vector<Slot> slots,
                        int64_t steps_since_ckpt = 0, double created_at = 0,
                        const std::string& queue = kDefaultQueue) {
  VictimCandidate c;
  c.id = id;
  c.queue = queue;
  c.device = "cpu";
  c.priority = priority;
  c.created_at = created_at;
  c.ranks = static_cast<int64_t>(slots.size());
  c.slots = std::move(slots);
  c.steps_since_checkpoint = steps_since_ckpt;
  return c;
}

PreemptionProblem Needs(int world, int ep, const std::string& within = "rack",
                        std::vector<Slot> free = {}) {
  PreemptionProblem p;
  p.request.world_size = world;
  p.request.expert_parallel = ep;
  p.request.within = within;
  p.request.device_type = "cpu";
  p.queue = kDefaultQueue;
  p.free = std::move(free);
  return p;
}

TEST(ChooseVictims, TheLowestPriorityGoesFirst) {
  const auto victims = ChooseVictims(
      Needs(1, 1, "any"),
      {Running("high", 5, Slots("h", "r0", 1)), Running("low", 1, Slots("l", "r0", 1))},
      QueueBook());
  EXPECT_EQ(victims, std::vector<std::string>{"low"});
}

// Two victims of equal priority and size: the one that loses less work (fewer steps since its
// newest checkpoint) is stopped.
TEST(ChooseVictims, OfEqualStandingTheOneWithFewerStepsSinceItsCheckpointGoes) {
  const auto victims =
      ChooseVictims(Needs(2, 1, "any"),
                    {Running("far-from-ckpt", 0, Slots("a", "r0", 2), /*steps=*/90),
                     Running("just-ckpt", 0, Slots("b", "r0", 2), /*steps=*/3)},
                    QueueBook());
  EXPECT_EQ(victims, std::vector<std::string>{"just-ckpt"});
  // Work lost counts every rank: 40 steps on 1 rank loses less than 30 steps on 2.
  const auto by_ranks = ChooseVictims(
      Needs(1, 1, "any"),
      {Running("wide", 0, Slots("w", "r0", 2), 30), Running("narrow", 0, Slots("n", "r0", 1), 40)},
      QueueBook());
  EXPECT_EQ(by_ranks, std::vector<std::string>{"narrow"});
}

// First fit takes the low-priority job in rack r0 (one worker, useless for an EP group of two that
// must stay in one rack), then the one in rack r1, which is enough alone: fill-back keeps the first
// running.
TEST(ChooseVictims, FillBackKeepsAVictimWhoseCapacityWasNotNeeded) {
  const std::vector<VictimCandidate> running = {Running("lowest", 0, Slots("x", "r0", 1)),
                                                Running("higher", 1, Slots("y", "r1", 2))};
  const auto victims = ChooseVictims(Needs(2, 2, "rack"), running, QueueBook());
  EXPECT_EQ(victims, std::vector<std::string>{"higher"})
      << "lowest was chosen first and given back";
}

TEST(ChooseVictims, FreeSlotsCountAndNoneIsChosenWhenAllWouldNotDo) {
  // One free worker in r0 and a victim's one in r0 make the group of two.
  EXPECT_EQ(ChooseVictims(Needs(2, 2, "rack", Slots("f", "r0", 1)),
                          {Running("v", 0, Slots("v", "r0", 1))}, QueueBook()),
            std::vector<std::string>{"v"});
  // Everything stopped would still not hold 4 ranks: nobody is stopped for nothing.
  EXPECT_TRUE(
      ChooseVictims(Needs(4, 1, "any"),
                    {Running("a", 0, Slots("a", "r0", 1)), Running("b", 0, Slots("b", "r1", 2))},
                    QueueBook())
          .empty());
  EXPECT_TRUE(ChooseVictims(Needs(1, 1, "any"), {}, QueueBook()).empty());
}

// A victim's ranks on a worker that cannot take new work (drained) free nothing for the preemptor,
// though its quota use goes.
TEST(ChooseVictims, OnlyPlaceableSlotsOfAVictimCount) {
  VictimCandidate drained = Running("on-drained", 0, {}, 0);
  drained.ranks = 2;
  EXPECT_EQ(ChooseVictims(Needs(2, 1, "any"), {drained, Running("ok", 1, Slots("k", "r0", 2))},
                          QueueBook()),
            std::vector<std::string>{"ok"});
}

QueueBook Cohort() {
  auto config = ParseQueuesConfig(R"(queues:
  - {name: research, cohort: shared, quota: {cpu: 2}}
  - {name: prod, cohort: shared, quota: {cpu: 2}}
default_queue: research
)");
  EXPECT_TRUE(config.ok()) << config.status();
  return QueueBook(*config);
}

// prod borrows research's quota (4 ranks on a nominal 2); research reclaims it for a job within its
// own nominal quota: prod's borrowers are the victims whatever their priority, but only as many as
// it takes to end the borrowing and fit.
TEST(ChooseVictims, ReclaimTakesBorrowersOnlyWhileTheyBorrow) {
  PreemptionProblem p = Needs(2, 1, "any");
  p.queue = "research";
  p.usage["prod"]["cpu"] = 4;
  VictimCandidate b1 = Running("borrower-1", 100, Slots("p", "r0", 2), 0, 1, "prod");
  VictimCandidate b2 = Running("borrower-2", 100, Slots("q", "r0", 2), 0, 2, "prod");
  b1.lent = b2.lent = true;
  const auto victims = ChooseVictims(p, {b1, b2}, Cohort());
  ASSERT_EQ(victims.size(), 1u) << "one borrower's two ranks give research its nominal 2 back";
  EXPECT_EQ(victims[0], "borrower-2") << "of two alike, the younger";
}

// The preemptor's own queue is full: only its own queue's lower-priority jobs free quota for it.
TEST(ChooseVictims, AQueueAtItsQuotaPreemptsItsOwnLowerPriorityJobs) {
  PreemptionProblem p = Needs(2, 1, "any", Slots("free", "r0", 2));
  p.queue = "research";
  p.usage["research"]["cpu"] = 2;
  p.usage["prod"]["cpu"] = 2;
  const auto victims =
      ChooseVictims(p, {Running("own-low", 0, Slots("o", "r1", 2), 0, 0, "research")}, Cohort());
  EXPECT_EQ(victims, std::vector<std::string>{"own-low"});
  EXPECT_TRUE(ChooseVictims(p, {}, Cohort()).empty()) << "free workers alone do not make quota";
}

TEST(PreemptBefore, BorrowersThenPriorityThenWorkLostThenSizeThenAge) {
  VictimCandidate lent = Running("lent", 9, Slots("a", "r0", 1));
  lent.lent = true;
  EXPECT_TRUE(PreemptBefore(lent, Running("low", 0, Slots("b", "r0", 1))));
  EXPECT_TRUE(PreemptBefore(Running("p0", 0, Slots("c", "r0", 1), 100),
                            Running("p1", 1, Slots("d", "r0", 1), 0)));
  EXPECT_TRUE(PreemptBefore(Running("few", 0, Slots("e", "r0", 1), 1),
                            Running("many", 0, Slots("f", "r0", 1), 2)));
  EXPECT_TRUE(PreemptBefore(Running("young", 0, Slots("g", "r0", 1), 0, 10),
                            Running("old", 0, Slots("h", "r0", 1), 0, 5)));
}

}  // namespace
}  // namespace moe::controller
