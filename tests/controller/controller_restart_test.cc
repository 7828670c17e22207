// The controller: lost and leaving workers, spares, elastic jobs, failures and restarts with their
// back-off and goodput, the run summary, cancel --now and drains.
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

TEST_F(ControllerTest, LostWorkerRestartsTheJobReplacingOnlyTheLostSlot) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto* c = AddWorker("c", "r0", "n2");
  auto job = Submit(Spec("j", 2, 2));
  // Which two got it?
  std::vector<std::pair<std::string, FakeChannel*>> used;
  for (auto [n, ch] : {std::pair{"a", a}, {"b", b}, {"c", c}})
    if (!ch->Assignments().empty()) used.emplace_back(n, ch);
  ASSERT_EQ(used.size(), 2u);
  const std::string survivor = used[0].first, victim = used[1].first;
  Step(survivor, used[0].second->Assignments()[0], 1);
  // The victim goes silent; the others keep heart-beating.
  LoseWorker(victim);
  auto j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.restarts(), 1);
  EXPECT_EQ(used[0].second->Cancels(), 1) << "the surviving rank is told to stop";
  EXPECT_EQ(j.state(), moe::v1::RESTARTING)
      << "waits for the survivor to stop before placing again";
  Finish(survivor, used[0].second->Assignments()[0], false, "stopped");
  controller_->Tick();
  j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.state(), moe::v1::SCHEDULED);
  EXPECT_EQ(j.attempt(), 2);
  // The survivor keeps its rank; the spare replaces the lost one.
  ASSERT_EQ(used[0].second->Assignments().size(), 2u);
  EXPECT_EQ(used[0].second->Assignments()[1].rank(), used[0].second->Assignments()[0].rank());
  EXPECT_EQ(used[0].second->Assignments()[1].attempt(), 2);
  const std::string spare =
      survivor != "a" && victim != "a" ? "a" : (survivor != "b" && victim != "b" ? "b" : "c");
  ASSERT_EQ(channels_[spare]->Assignments().size(), 1u);
  const auto types = EventTypes(job.id());
  EXPECT_NE(std::find(types.begin(), types.end(), "AttemptFailed"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "Restarting"), types.end());
  bool lost_reason = false;
  for (const auto& e : j.events())
    lost_reason |= e.message().find("lost: no heartbeat") != std::string::npos;
  EXPECT_TRUE(lost_reason);
}

// --spares-per-rack 1: each rack of 3 keeps one worker out of new placements. An EP group that must
// stay in one rack loses rank 1's worker; its restart takes that rack's spare and does not move,
// although a fresh job would have been refused the spare.
TEST_F(ControllerTest, ALostWorkerIsReplacedFromItsRacksSpareAndTheGroupStaysInTheRack) {
  config_.spares_per_rack = 1;
  Make();
  for (const char* w : {"a0", "a1", "a2"}) AddWorker(w, "r0", std::string("n-") + w);
  for (const char* w : {"b0", "b1", "b2"}) AddWorker(w, "r1", std::string("n-") + w);
  auto racks = [&] {
    std::map<std::string, moe::v1::RackStatus> out;
    const moe::v1::ListRacksResponse resp = controller_->Racks();
    EXPECT_EQ(resp.spares_per_rack(), 1);
    for (const auto& r : resp.racks()) out[r.name()] = r;
    return out;
  };
  EXPECT_EQ(racks()["r0"].spares(), 1);
  EXPECT_EQ(racks()["r0"].idle(), 3);

  auto job = Submit(Spec("ep", 2, 2));  // EP 2, groups within one rack
  auto j = *controller_->Get(job.id(), false);
  ASSERT_EQ(j.state(), moe::v1::SCHEDULED) << j.waiting_reason();
  ASSERT_EQ(j.placement_size(), 2);
  const std::string rack = j.placement(0).rack();
  EXPECT_EQ(j.placement(1).rack(), rack);
  const std::string other = rack == "r0" ? "r1" : "r0";
  // A second job finds the rest of that rack held back: it goes to the other rack.
  auto small = Submit(Spec("small", 1, 1));
  ASSERT_EQ(State(small.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->Get(small.id(), false)->placement(0).rack(), other)
      << "the ep job's rack keeps its spare";
  EXPECT_EQ(racks()[rack].spares(), 1);
  EXPECT_EQ(racks()[rack].spares_in_use(), 0);
  EXPECT_EQ(racks()[rack].busy(), 2);

  // Rank 1's worker is lost (its stream ends); rank 0 stops; the restart is placed.
  const std::string survivor = j.placement(0).worker(), lost = j.placement(1).worker();
  for (int r = 0; r < 2; ++r)
    Step(j.placement(r).worker(), channels_[j.placement(r).worker()]->Assignments()[0], 1);
  controller_->Disconnected(lost, channels_[lost].get());
  ASSERT_EQ(State(job.id()), moe::v1::RESTARTING);
  Finish(survivor, channels_[survivor]->Assignments()[0], false, "stopped");
  controller_->Tick();
  j = *controller_->Get(job.id(), false);
  ASSERT_EQ(j.state(), moe::v1::SCHEDULED) << j.waiting_reason();
  EXPECT_EQ(j.attempt(), 2);
  ASSERT_EQ(j.placement_size(), 2);
  EXPECT_EQ(j.placement(0).worker(), survivor) << "the survivor keeps its rank";
  EXPECT_NE(j.placement(1).worker(), lost);
  for (const auto& p : j.placement()) EXPECT_EQ(p.rack(), rack) << "rank " << p.rank();
  // The EP group (ranks 0 and 1) is inside one NVLink domain.
  EXPECT_EQ(j.placement(0).rack(), j.placement(1).rack());
  const auto now = racks();
  EXPECT_EQ(now.at(rack).spares_in_use(), 1) << "the restart runs on the rack's spare";
  EXPECT_EQ(now.at(rack).spares(), 0);
  EXPECT_EQ(now.at(rack).lost(), 1);
  EXPECT_EQ(now.at(rack).busy(), 2);
  EXPECT_EQ(now.at(other).spares_in_use(), 0);
  EXPECT_EQ(now.at(other).spares(), 1);
  clock_.Advance(1);  // /metrics' cluster view is refreshed once a second
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(RackGauge("moe_rack_spares_in_use", rack), 1.0);
  EXPECT_EQ(RackGauge("moe_rack_spares", rack), 0.0);
  EXPECT_EQ(RackGauge("moe_rack_spares", other), 1.0);
  // No spare left in either rack for a fresh job of 2: it waits and says why.
  auto late = Submit(Spec("late", 2, 2));
  const auto waiting = *controller_->Get(late.id(), false);
  EXPECT_EQ(waiting.state(), moe::v1::PENDING);
  EXPECT_NE(waiting.waiting_reason().find("spares"), std::string::npos) << waiting.waiting_reason();
  // A worker joins the rack (the repaired tray): it is the rack's spare now (spares are a count,
  // not fixed workers), and the late job still waits for room outside the spares.
  AddWorker(rack + "-new", rack, "n-new");
  EXPECT_EQ(State(late.id()), moe::v1::PENDING);
  EXPECT_EQ(racks()[rack].spares(), 1);
  EXPECT_EQ(racks()[rack].spares_in_use(), 0);
}

// A clean worker stop (SIGTERM, a rolling update): the worker says it is leaving; every rank is
// told to stop (they checkpoint at the same step boundary); the job goes back to the queue without
// using a restart and resumes elsewhere; the worker is removed when its stream closes, not marked
// lost.
TEST_F(ControllerTest, AnElasticJobContinuesSmallerAfterALossAndGrowsBackWhenAWorkerJoins) {
  for (const char* w : {"w0", "w1", "w2", "w3"}) AddWorker(w, "r0", w);
  JobSpec s = Spec("el", 4, 2);
  s.data.global_batch_size = 8;
  s.elastic.min_data_parallel = 2;
  auto job = Submit(s);
  ASSERT_EQ(State(job.id()), moe::v1::SCHEDULED);
  for (const char* w : {"w0", "w1", "w2", "w3"}) Step(w, channels_[w]->Assignments().back(), 1);
  // w3 goes silent; there is no spare.
  LoseWorker("w3");
  for (const char* w : {"w0", "w1", "w2"})
    Finish(w, channels_[w]->Assignments().back(), false, "stopped");
  controller_->Tick();
  auto j = *controller_->Get(job.id(), true);
  ASSERT_EQ(j.state(), moe::v1::SCHEDULED) << j.waiting_reason();
  EXPECT_EQ(j.placement_size(), 2) << "data-parallel 2 (EP 2): two ranks";
  int at_two = 0;
  for (const char* w : {"w0", "w1", "w2"}) {
    const auto a = channels_[w]->Assignments().back();
    if (a.attempt() == 2) {
      ++at_two;
      EXPECT_EQ(a.spec().spec().parallelism().world_size(), 2)
          << "the attempt's world size, in the spec";
    }
  }
  EXPECT_EQ(at_two, 2);
  EXPECT_EQ(EventCount(job.id(), "Resized"), 1);
  // A job of 3 ranks (DP 3 is not a multiple of EP 2) is never chosen; the spare left stays free
  // until a fourth worker makes the whole size fit again.
  std::string free_one;
  for (const char* w : {"w0", "w1", "w2"}) {
    const auto a = channels_[w]->Assignments().back();
    if (a.attempt() == 2)
      Step(w, a, 2);
    else
      free_one = w;
  }
  EXPECT_EQ(EventCount(job.id(), "Resizing"), 0);
  AddWorker("w4", "r0", "w4");
  EXPECT_EQ(EventCount(job.id(), "Resizing"), 1)
      << "w4 and the free worker make room for all 4 ranks";
  for (const char* w : {"w0", "w1", "w2"}) {
    const auto a = channels_[w]->Assignments().back();
    if (a.attempt() == 2) Finish(w, a, false, "stopped after step 2 (asked to stop)");
  }
  controller_->Tick();
  j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.state(), moe::v1::SCHEDULED);
  EXPECT_EQ(j.placement_size(), 4);
  EXPECT_EQ(j.attempt(), 3);
  EXPECT_EQ(j.restarts(), 1) << "the loss used a restart, growing back none";
}

TEST_F(ControllerTest, AWorkerThatLeavesCleanlyRequeuesItsJobWithoutUsingARestart) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2, 0, /*max_restarts=*/0));  // no restart budget at all
  ASSERT_EQ(a->Assignments().size(), 1u);
  ASSERT_EQ(b->Assignments().size(), 1u);
  Step("a", a->Assignments()[0], 1);
  Step("b", b->Assignments()[0], 1);
  moe::v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("SIGTERM to moe-worker");
  Msg("b", leaving);
  EXPECT_EQ(a->Cancels(), 1) << "every rank stops at the next step boundary";
  EXPECT_EQ(b->Cancels(), 1);
  EXPECT_EQ(State(job.id()), moe::v1::RESTARTING);
  for (const auto& w : controller_->Workers()) {
    if (w.name() == "b") {
      EXPECT_EQ(w.state(), moe::v1::LEAVING);
    }
  }
  // A spare arrives; the ranks report their stop; b's stream closes.
  auto* c = AddWorker("c", "r0", "n2");
  EXPECT_TRUE(c->Assignments().empty()) << "nothing is placed while the old attempt's ranks run";
  Finish("a", a->Assignments()[0], false, "stopped after step 1 (asked to stop)");
  Finish("b", b->Assignments()[0], false, "stopped after step 1 (asked to stop)");
  controller_->Disconnected("b", channels_["b"].get());
  controller_->Tick();
  auto j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.state(), moe::v1::SCHEDULED) << j.message();
  EXPECT_EQ(j.attempt(), 2);
  EXPECT_EQ(j.restarts(), 0) << "a clean leave uses no restart";
  ASSERT_EQ(a->Assignments().size(), 2u);
  EXPECT_TRUE(a->Assignments()[1].resume());
  ASSERT_EQ(c->Assignments().size(), 1u) << "the spare takes the leaver's rank";
  EXPECT_EQ(c->Assignments()[0].rank(), b->Assignments()[0].rank());
  EXPECT_EQ(EventCount(job.id(), "AttemptRequeued"), 1);
  EXPECT_EQ(EventCount(job.id(), "AttemptFailed"), 0);
  EXPECT_EQ(EventCount(job.id(), "Requeued"), 1);
  for (const auto& w : controller_->Workers())
    EXPECT_NE(w.name(), "b") << "a worker that left is removed, not lost";
  auto stored = store_.LoadWorkers();
  ASSERT_TRUE(stored.ok());
  for (const auto& w : *stored)
    EXPECT_NE(w.info.name(), "b") << "and forgotten by the store (its name is free)";
  // Its name is free: a new worker may take it.
  AddWorker("b", "r0", "n1");
}

TEST_F(ControllerTest, LostWorkersAreDeletedOnRequestOrForgottenAfterTheRetention) {
  config_.lost_worker_retention_seconds = 100;
  config_.lease_seconds = 5;
  Make();
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  AddWorker("c", "r0", "n2");
  EXPECT_EQ(controller_->DeleteWorker("a").code(), StatusCode::kFailedPrecondition)
      << "connected: stop it instead";
  EXPECT_EQ(controller_->DeleteWorker("nope").code(), StatusCode::kNotFound);
  controller_->Disconnected("a", channels_["a"].get());
  controller_->Disconnected("b", channels_["b"].get());
  ASSERT_EQ(controller_->Workers().size(), 3u) << "lost workers stay listed for a while";
  ASSERT_TRUE(controller_->DeleteWorker("a").ok());
  EXPECT_EQ(controller_->Workers().size(), 2u);
  for (int i = 0; i < 101; ++i) {
    clock_.Advance(1);
    moe::v1::WorkerMessage hb;
    hb.mutable_heartbeat();
    Msg("c", hb);
    controller_->Tick();
  }
  auto workers = controller_->Workers();
  ASSERT_EQ(workers.size(), 1u) << "b was lost longer than the retention";
  EXPECT_EQ(workers[0].name(), "c");
}

// Goodput (issue 33): a failure at a known step costs the steps since the last checkpoint as redone
// time; the account agrees with a hand computation from the job's events and is stored with the
// job.
TEST_F(ControllerTest, AFailureCostsTheStepsSinceTheCheckpointAsRedoneTimeAndTheAccountIsStored) {
  auto* a = AddWorker("a", "r0", "n0");
  JobSpec spec = Spec("g", 1, 1);
  spec.training.steps = 12;
  auto job = Submit(spec);  // placed at once: nothing waits
  clock_.Advance(2);        // start-up: the first report 2 s after the placement
  Step("a", a->Assignments()[0], 1);
  for (int s = 2; s <= 10; ++s) {  // a step a second; a checkpoint of step 5 from step 6 on
    clock_.Advance(1);
    Step("a", a->Assignments()[0], s, 0.1, s > 5 ? 5 : 0);
  }
  clock_.Advance(0.5);
  Finish("a", a->Assignments()[0], false, "a rank crashed");  // restarts at once (no back-off)
  ASSERT_EQ(a->Assignments().size(), 2u);
  clock_.Advance(2);
  Step("a", a->Assignments()[1], 6, 0.1, 5);  // resumed from the checkpoint of step 5
  for (int s = 7; s <= 12; ++s) {
    clock_.Advance(1);
    Step("a", a->Assignments()[1], s, 0.1, 5);
  }
  clock_.Advance(1);  // the final save
  Finish("a", a->Assignments()[1], true);
  ASSERT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  const moe::v1::Job done = *controller_->Get(job.id(), true);
  const moe::v1::Goodput& g = done.goodput();
  // Steps 7-10 again and the half step the failure cut off: (10 - 5) steps x 1 s within 20 %.
  EXPECT_NEAR(g.redone_seconds(), 4.5, 1e-6);
  EXPECT_NEAR(g.redone_seconds(), 5.0, 5.0 * 0.2);
  EXPECT_NEAR(g.productive_seconds(), 9 + 2, 1e-6) << "steps 2-10 once, then 11 and 12";
  EXPECT_NEAR(g.checkpoint_seconds(), 1, 1e-6);
  // By hand from the events: wall = the end - the submission; starting = each attempt's
  // placement to its first report.
  std::map<std::string, std::vector<double>> at;
  for (const auto& e : done.events()) at[e.type()].push_back(e.time());
  ASSERT_EQ(at["Scheduled"].size(), 2u);
  ASSERT_EQ(at["Running"].size(), 2u);
  EXPECT_NEAR(g.wall_seconds(), at["Succeeded"].at(0) - at["Submitted"].at(0), 1e-6);
  EXPECT_NEAR(g.starting_seconds(),
              (at["Running"][0] - at["Scheduled"][0]) + (at["Running"][1] - at["Scheduled"][1]),
              1e-6);
  EXPECT_NEAR(g.ratio(), 11 / 20.5, 1e-9);
  // A restarted controller reads the same account from the store.
  Make();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      controller_->Get(job.id(), false)->goodput(), g));
}

TEST_F(ControllerTest, AFailedRankRestartsUntilMaxRestartsThenFails) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1, 0, /*max_restarts=*/1));
  Finish("a", a->Assignments()[0], false,
         "training failed: INTERNAL: step 3: the loss is nan (diverged)");
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED)
      << "restarted at once: the rank has already stopped";
  ASSERT_EQ(a->Assignments().size(), 2u);
  Finish("a", a->Assignments()[1], false, "training failed again");
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::FAILED);
  EXPECT_NE(j.message().find("training failed again"), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("max_restarts is 1"), std::string::npos) << j.message();
}

// Job.checkpoint_time: when the newest checkpoint first showed (before one, the first step), stored
// with the job; moe_jobs_finished_total counts a job's end once, not again when a restarted
// controller loads it.
TEST_F(ControllerTest, TheCheckpointsTimeIsStoredAndARestartedControllerCountsNoEndAgain) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  Step("a", a->Assignments()[0], 1);
  EXPECT_EQ(controller_->Get(job.id(), false)->checkpoint_time(), clock_.Now())
      << "no checkpoint yet: the first step's time";
  clock_.Advance(5);
  Step("a", a->Assignments()[0], 2, 0.1, /*checkpoint_step=*/1);
  const double saved = clock_.Now();
  clock_.Advance(5);
  Step("a", a->Assignments()[0], 3, 0.1, /*checkpoint_step=*/1);
  EXPECT_EQ(controller_->Get(job.id(), false)->checkpoint_time(), saved)
      << "when checkpoint 1 first showed, not its later reports";
  Finish("a", a->Assignments()[0], true);
  ASSERT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(Gauge("moe_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1.0);
  controller_.reset();
  Make();
  EXPECT_EQ(controller_->Get(job.id(), false)->checkpoint_time(), saved) << "stored with the job";
  EXPECT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(Gauge("moe_jobs_finished_total", {{"state", "SUCCEEDED"}}), 0.0)
      << "a job loaded in its final state is not counted again";
}

TEST_F(ControllerTest, ARestartWaitsItsBackoffDoublingUpToTheCapAndSaysWhereItResumes) {
  config_.restart_backoff_seconds = 10;
  config_.restart_backoff_max_seconds = 25;
  Make();
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1, 0, /*max_restarts=*/3));
  Step("a", a->Assignments()[0], 1);
  Finish("a", a->Assignments()[0], false, "boom");
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::RESTARTING);
  EXPECT_NE(j.message().find("restart 1 of 3 in 10 s (rank 0 on worker a failed: boom); it starts "
                             "over from step 0: no checkpoint reported yet"),
            std::string::npos)
      << j.message();
  EXPECT_NE(j.waiting_reason().find("restart backoff: placed again in 10 s"), std::string::npos)
      << j.waiting_reason();
  clock_.Advance(9);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(a->Assignments().size(), 1u) << "placed before its backoff ended";
  clock_.Advance(1.5);
  Heartbeats();
  controller_->Tick();
  ASSERT_EQ(a->Assignments().size(), 2u) << "not placed once its backoff ended";
  Step("a", a->Assignments()[1], 2, 0.1, /*checkpoint_step=*/2);
  Finish("a", a->Assignments()[1], false, "boom again");
  j = *controller_->Get(job.id(), false);
  EXPECT_NE(j.message().find("restart 2 of 3 in 20 s ("), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("); it resumes from the checkpoint of step 2"), std::string::npos)
      << j.message();
  EXPECT_EQ(j.checkpoint_step(), 2);
  EXPECT_EQ(j.checkpoint_time(), clock_.Now()) << "when checkpoint 2 first showed in a report";
  clock_.Advance(20.5);
  Heartbeats();
  controller_->Tick();
  ASSERT_EQ(a->Assignments().size(), 3u);
  EXPECT_EQ(Gauge("moe_job_checkpoint_step", {{"job_id", job.id()}}), 2.0);
  EXPECT_EQ(Gauge("moe_job_checkpoint_age_seconds", {{"job_id", job.id()}}), 20.5)
      << "the seconds since checkpoint 2 showed, through the restart";
  Finish("a", a->Assignments()[2], false, "and again");
  j = *controller_->Get(job.id(), false);
  EXPECT_NE(j.message().find("restart 3 of 3 in 25 s"), std::string::npos)
      << "capped: " << j.message();
  ASSERT_TRUE(controller_->Cancel(job.id()).ok()) << "a job in its backoff can be cancelled";
  clock_.Advance(30);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(a->Assignments().size(), 3u) << "a cancelled job is not placed when its backoff ends";
}

// A restart's back-off does not lose its placement: the workers its last attempt ran on are held
// for it (a queued job of equal priority waits, and says why) until it is placed again; a job of
// higher priority may take them, and the restarting job hears it.
TEST_F(ControllerTest, ARestartingJobsWorkersAreHeldThroughItsBackoff) {
  config_.restart_backoff_seconds = 10;
  Make();
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2));
  ASSERT_EQ(State(job.id()), moe::v1::SCHEDULED);
  Step("a", a->Assignments()[0], 1);
  Step("b", b->Assignments()[0], 1);
  Finish("a", a->Assignments()[0], false, "boom");
  Finish("b", b->Assignments()[0], false, "stopped: its peer failed");
  ASSERT_EQ(State(job.id()), moe::v1::RESTARTING);
  auto same = Submit(Spec("same", 1, 1));
  EXPECT_EQ(State(same.id()), moe::v1::PENDING) << "it took a worker held for the restart";
  const std::string why = controller_->Get(same.id(), false)->waiting_reason();
  EXPECT_NE(why.find("2 free worker(s) are held for the restart of " + job.id()), std::string::npos)
      << why;
  clock_.Advance(10.5);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED) << "placed again once its back-off ended";
  EXPECT_EQ(State(same.id()), moe::v1::PENDING);
  ASSERT_EQ(a->Assignments().size(), 2u);
  ASSERT_EQ(b->Assignments().size(), 2u);
  EXPECT_EQ(a->Assignments()[1].job_id(), job.id());
  // Failed again: during this back-off a job of higher priority takes one of its workers.
  Finish("a", a->Assignments()[1], false, "boom again");
  Finish("b", b->Assignments()[1], false, "stopped: its peer failed");
  ASSERT_EQ(State(job.id()), moe::v1::RESTARTING);
  auto high = Submit(Spec("high", 1, 1, /*priority=*/10));
  EXPECT_EQ(State(high.id()), moe::v1::SCHEDULED) << "a higher priority is not held back";
  EXPECT_EQ(EventCount(job.id(), "ReservationTaken"), 1);
  EXPECT_EQ(State(same.id()), moe::v1::PENDING) << "the other worker is still held";
}

TEST_F(ControllerTest, TheRunSummaryCountsEveryStepAndLeavesEachAttemptsFirstOutOfTheMeans) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  for (int64_t s = 1; s <= 3; ++s) Step("a", a->Assignments()[0], s);
  Finish("a", a->Assignments()[0], false, "lost a peer");
  ASSERT_EQ(a->Assignments().size(), 2u);
  Step("a", a->Assignments()[1], 3);  // resumed from step 2: step 3 again, then 4
  Step("a", a->Assignments()[1], 4);
  const moe::v1::RunSummary s = controller_->Get(job.id(), false)->summary();
  EXPECT_EQ(s.first_step(), 1);
  EXPECT_DOUBLE_EQ(s.first_loss(), 5.0);
  EXPECT_EQ(s.reported_steps(), 5);
  EXPECT_EQ(s.measured_steps(), 3) << "steps 2, 3 of attempt 1 and step 4 of attempt 2";
  EXPECT_DOUBLE_EQ(s.tflops_sum(), 2 + 3 + 4);
  EXPECT_NEAR(s.step_seconds_sum(), 0.6, 1e-9);
}

TEST_F(ControllerTest, CancelNowKillsTheRanksAndDrainWithMoveWorkRequeuesWithoutARestart) {
  auto* a = AddWorker("a", "r0", "n0");
  auto first = Submit(Spec("first", 1, 1, 0, /*max_restarts=*/0));
  ASSERT_TRUE(controller_->Cancel(first.id(), "alice", /*now=*/true).ok());
  ASSERT_FALSE(a->sent.empty());
  ASSERT_TRUE(a->sent.back().has_cancel());
  EXPECT_TRUE(a->sent.back().cancel().now());
  EXPECT_NE(controller_->Get(first.id(), false)->message().find("--now"), std::string::npos);
  Finish("a", a->Assignments()[0], false, "killed");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 1, 1, 0, /*max_restarts=*/0));
  FakeChannel* on = a->Assignments().size() == 2 ? a : b;
  const std::string name = on == a ? "a" : "b";
  FakeChannel* other = on == a ? b : a;
  ASSERT_EQ(on->Assignments().back().job_id(), job.id());
  Step(name, on->Assignments().back(), 1);
  auto w = controller_->SetDrained(name, true, "bob", /*move_work=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(on->sent.back().has_cancel());
  EXPECT_FALSE(on->sent.back().cancel().now()) << "a drain lets the rank checkpoint";
  Finish(name, on->Assignments().back(), false, "stopped after step 1 (asked to stop)");
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::SCHEDULED) << j.message();
  EXPECT_EQ(j.restarts(), 0) << "a drain uses no restart";
  ASSERT_FALSE(other->Assignments().empty());
  EXPECT_EQ(other->Assignments().back().job_id(), job.id()) << "it continues on the other worker";
  for (const auto& x : controller_->Workers()) {
    if (x.name() == name) {
      EXPECT_TRUE(x.drained());
    }
  }
}

}  // namespace
}  // namespace moe::controller
