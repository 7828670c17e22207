// The controller: permanent failures, cancel and STOPPING, time limits, what counts as success,
// resubmissions, dependencies, drained workers, node agents, stragglers.
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

// Node agent node0 (rack r0, node n0) of `devices` CPU slots on 8 cores.
moe::v1::Register NodeAgent(int devices) {
  moe::v1::Register r;
  r.set_name("node0");
  r.set_rack("r0");
  r.set_node("n0");
  r.set_device("cpu");
  for (int i = 0; i < devices; ++i) r.add_devices("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_cpu_cores(8);
  return r;
}

TEST_F(ControllerTest, APermanentFailureWinsOverAPeersTransientOneThatCameFirst) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2));
  Finish("b", b->Assignments()[0], false,
         "gloo rendezvous failed: Connection closed by peer");  // transient
  EXPECT_EQ(State(job.id()), moe::v1::RESTARTING);
  moe::v1::WorkerMessage m;
  auto* f = m.mutable_finished();
  f->set_job_id(a->Assignments()[0].job_id());
  f->set_attempt(a->Assignments()[0].attempt());
  f->set_rank(a->Assignments()[0].rank());
  f->set_exit_code(4);
  f->set_failure_class(moe::v1::FAILURE_PERMANENT);
  f->set_message("FAILED_PRECONDITION: dataset index data/x.idx cannot be read");
  Msg("a", m);
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::FAILED) << j.message();
  EXPECT_NE(j.message().find("dataset index data/x.idx cannot be read"), std::string::npos)
      << j.message();
  EXPECT_EQ(a->Assignments().size(), 1u) << "not restarted";
}

// Step reports are telemetry, off the change lock: kept (the newest per rank) until the tick folds
// them in; a forged one is still refused at once; a rank's end folds its kept steps first, so its
// last step counts.
TEST_F(ControllerTest, StepReportsAreKeptUntilTheTickAndTheNewestWins) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  const moe::v1::Assignment asg = a->Assignments()[0];
  const auto report = [&](int64_t step) { return StepMessage(asg, step); };
  ASSERT_TRUE(controller_->OnWorkerMessage("a", report(2)).ok());
  ASSERT_TRUE(controller_->OnWorkerMessage("a", report(3)).ok());
  ASSERT_TRUE(controller_->OnWorkerMessage("a", report(1)).ok()) << "an older one is kept out";
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED) << "nothing folded in before the tick";
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", report(4)).code(),
            StatusCode::kPermissionDenied)
      << "checked as it arrives";
  controller_->FoldSteps();
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::RUNNING);
  EXPECT_EQ(j.last_metrics().step(), 3) << "the newest step of the rank";
  // The last step, kept, then the rank's end on the same stream: the end folds the step first, so
  // the success is believed (it needs the steps at the total).
  const int64_t total = asg.spec().spec().training().steps();
  ASSERT_TRUE(controller_->OnWorkerMessage("a", report(total)).ok());
  moe::v1::WorkerMessage fin;
  fin.mutable_finished()->set_job_id(asg.job_id());
  fin.mutable_finished()->set_attempt(asg.attempt());
  fin.mutable_finished()->set_rank(asg.rank());
  fin.mutable_finished()->set_ok(true);
  fin.mutable_finished()->set_checkpoint_step(total);
  ASSERT_TRUE(controller_->OnWorkerMessage("a", fin).ok());
  controller_->Tick();
  j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::SUCCEEDED) << j.message();
  EXPECT_EQ(j.last_metrics().step(), total);
}

TEST_F(ControllerTest, CancelStopsTheRanks) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  Step("a", a->Assignments()[0], 5, 0.1, /*checkpoint_step=*/0);
  auto c = controller_->Cancel(job.id());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->state(), moe::v1::STOPPING) << "until its ranks ended";
  EXPECT_EQ(c->stop_state(), moe::v1::CANCELLED);
  EXPECT_EQ(a->Cancels(), 1);
  auto again = controller_->Cancel(job.id());
  ASSERT_TRUE(again.ok()) << "a cancel of a stopping job changes nothing";
  EXPECT_EQ(again->state(), moe::v1::STOPPING);
  EXPECT_EQ(a->Cancels(), 1);
  EXPECT_EQ(controller_->Workers()[0].state(), moe::v1::BUSY) << "busy until its rank ended";
  EXPECT_EQ(controller_->Cancel("nope").status().code(), StatusCode::kNotFound);
  moe::v1::WorkerMessage m;  // the rank saved step 6 as it stopped
  auto* f = m.mutable_finished();
  f->set_job_id(job.id());
  f->set_attempt(1);
  f->set_rank(0);
  f->set_ok(false);
  f->set_failure_class(moe::v1::FAILURE_STOPPED);
  f->set_checkpoint_step(6);
  f->set_message("stopped after step 6");
  Msg("a", m);
  auto done = *controller_->Get(job.id(), false);
  EXPECT_EQ(done.state(), moe::v1::CANCELLED) << done.message();
  EXPECT_EQ(done.checkpoint_step(), 6) << "the stop's checkpoint is recorded";
  EXPECT_NE(done.message().find("its checkpoint is step 6"), std::string::npos) << done.message();
  EXPECT_EQ(controller_->Workers()[0].state(), moe::v1::IDLE);
  EXPECT_FALSE(controller_->Cancel(job.id()).ok()) << "already ended";
}

TEST_F(ControllerTest, CancelNowOfAStoppingJobEndsItAtOnce) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  ASSERT_EQ(controller_->Cancel(job.id())->state(), moe::v1::STOPPING);
  auto now = controller_->Cancel(job.id(), "", /*now=*/true);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->state(), moe::v1::CANCELLED);
  EXPECT_EQ(a->Cancels(), 2) << "told again, to die now";
}

TEST_F(ControllerTest, ATimeLimitStopsTheJobWithACheckpointAndEndsItTimeout) {
  auto* a = AddWorker("a", "r0", "n0");
  JobSpec s = Spec("t", 1, 1);
  s.time_limit = 30;
  auto job = Submit(s);
  const auto asg = a->Assignments()[0];
  Step("a", asg, 1);
  for (int i = 0; i < 20; ++i) {  // 20 s on its worker: within the limit
    clock_.Advance(1);
    Heartbeats();
    Step("a", asg, 2 + i);
    controller_->Tick();
  }
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(1);
    Heartbeats();
    controller_->Tick();
  }
  EXPECT_EQ(State(job.id()), moe::v1::STOPPING) << "past 30 s on its worker";
  EXPECT_EQ(a->Cancels(), 1);
  moe::v1::WorkerMessage m;
  auto* f = m.mutable_finished();
  f->set_job_id(job.id());
  f->set_attempt(1);
  f->set_rank(0);
  f->set_failure_class(moe::v1::FAILURE_STOPPED);
  f->set_checkpoint_step(21);
  Msg("a", m);
  auto done = *controller_->Get(job.id(), true);
  EXPECT_EQ(done.state(), moe::v1::TIMEOUT) << done.message();
  EXPECT_EQ(done.checkpoint_step(), 21);
  EXPECT_NE(done.message().find("time limit of 30 s reached"), std::string::npos) << done.message();
  EXPECT_EQ(done.events(done.events_size() - 1).type(), "TimedOut");
}

TEST_F(ControllerTest, ASucceededJobRecordsItsFinalCheckpoint) {
  auto* a = AddWorker("a", "r0", "n0");
  JobSpec s = Spec("s", 1, 1);
  s.training.steps = 60;
  auto job = Submit(s);
  Step("a", a->Assignments()[0], 60, 0.1, /*checkpoint_step=*/50);
  moe::v1::WorkerMessage m;
  auto* f = m.mutable_finished();
  f->set_job_id(job.id());
  f->set_attempt(1);
  f->set_rank(0);
  f->set_ok(true);
  f->set_failure_class(moe::v1::FAILURE_NONE);
  f->set_checkpoint_step(60);
  Msg("a", m);
  auto done = *controller_->Get(job.id(), false);
  EXPECT_EQ(done.state(), moe::v1::SUCCEEDED);
  EXPECT_EQ(done.checkpoint_step(), 60) << "the final save, after the last step report";
}

// A worker's word is not a finished job (a client with the worker token made three jobs SUCCEED in
// a second with no training, set a checkpoint stall of 1e15 s and 3e18 tokens): step reports past
// the total, backwards, with times longer than the attempt has run or more tokens than a global
// batch are dropped; a success without the final checkpoint fails the attempt; one before the last
// step's report waits for it, and is doubted when it never comes.
TEST_F(ControllerTest, AWorkersWordIsNotAFinishedJob) {
  auto* a = AddWorker("a", "r0", "n0");
  JobSpec spec = Spec("liar", 1, 1);
  spec.training.steps = 30;
  auto job = Submit(spec);
  const moe::v1::Assignment first = a->Assignments()[0];
  Step("a", first, 5);
  auto last = [&] { return controller_->Get(job.id(), false)->last_metrics(); };
  Step("a", first, 31);
  EXPECT_EQ(last().step(), 5) << "a step past the total";
  Step("a", first, 4);
  EXPECT_EQ(last().step(), 5) << "a step backwards";
  auto lie = [&](const std::function<void(moe::v1::StepMetrics*)>& set) {
    moe::v1::WorkerMessage m;
    auto* st = m.mutable_step();
    st->set_job_id(first.job_id());
    st->set_attempt(first.attempt());
    st->set_rank(0);
    st->mutable_metrics()->set_step(6);
    st->mutable_metrics()->set_total_steps(30);
    set(st->mutable_metrics());
    Msg("a", m);
  };
  lie([](moe::v1::StepMetrics* m) { m->set_checkpoint_stall_seconds(1e15); });
  lie([](moe::v1::StepMetrics* m) { m->set_tokens(int64_t{3000000000000000000}); });
  lie([](moe::v1::StepMetrics* m) { m->set_step_seconds(1e9); });
  EXPECT_EQ(last().step(), 5) << "an impossible time or token count";
  EXPECT_EQ(controller_->Get(job.id(), false)->goodput().checkpoint_seconds(), 0);
  // Success at step 5 with a final checkpoint claimed: held for the last step's report, which
  // never comes; doubted at the deadline, the attempt fails.
  moe::v1::WorkerMessage fin;
  fin.mutable_finished()->set_job_id(job.id());
  fin.mutable_finished()->set_attempt(1);
  fin.mutable_finished()->set_rank(0);
  fin.mutable_finished()->set_ok(true);
  fin.mutable_finished()->set_checkpoint_step(30);
  Msg("a", fin);
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING) << "held for the last step";
  for (int i = 0; i < 31; ++i) {
    clock_.Advance(1);
    Heartbeats();
    controller_->Tick();
  }
  auto doubted = *controller_->Get(job.id(), false);
  EXPECT_NE(doubted.state(), moe::v1::SUCCEEDED);
  EXPECT_EQ(doubted.restarts(), 1);
  // The next attempt: success without the final checkpoint fails at once.
  ASSERT_EQ(a->Assignments().size(), 2u);
  const moe::v1::Assignment second = a->Assignments()[1];
  Step("a", second, 30);
  fin.mutable_finished()->set_attempt(2);
  fin.mutable_finished()->set_checkpoint_step(20);
  Msg("a", fin);
  EXPECT_EQ(controller_->Get(job.id(), false)->restarts(), 2) << "a success without its checkpoint";
  // The third: the success comes before the last step's report (another agent's rank) and is
  // believed once the report arrives.
  ASSERT_EQ(a->Assignments().size(), 3u);
  const moe::v1::Assignment third = a->Assignments()[2];
  Step("a", third, 29);
  fin.mutable_finished()->set_attempt(3);
  fin.mutable_finished()->set_checkpoint_step(30);
  Msg("a", fin);
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
  Step("a", third, 30);
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SUCCEEDED);
}

// A resubmission takes its finished predecessor's directory and newest checkpoint: a rank that
// finds the final checkpoint there has nothing left to train, and its success (no step reported in
// its attempt) is believed on the inherited checkpoint (control_plane_test's resubmitted job
// failed).
TEST_F(ControllerTest, AResubmissionInheritsItsPredecessorsCheckpoint) {
  auto* a = AddWorker("a", "r0", "n0");
  JobSpec spec = Spec("again", 1, 1);
  spec.training.steps = 30;
  auto first = Submit(spec);
  Finish("a", a->Assignments()[0], true);
  ASSERT_EQ(State(first.id()), moe::v1::SUCCEEDED);
  auto second = Submit(spec);
  EXPECT_EQ(controller_->Get(second.id(), false)->checkpoint_step(), 30);
  ASSERT_EQ(a->Assignments().size(), 2u);
  moe::v1::WorkerMessage fin;
  fin.mutable_finished()->set_job_id(second.id());
  fin.mutable_finished()->set_attempt(1);
  fin.mutable_finished()->set_rank(0);
  fin.mutable_finished()->set_ok(true);
  fin.mutable_finished()->set_checkpoint_step(30);
  Msg("a", fin);
  controller_->Tick();
  EXPECT_EQ(State(second.id()), moe::v1::SUCCEEDED);
}

TEST_F(ControllerTest, DependenciesHoldAJobAndCancelItWhenTheyCannotHold) {
  auto* a = AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  auto first = Submit(Spec("first", 1, 1));
  JobSpec s = Spec("second", 1, 1);
  s.depends_on.push_back({"first", "succeeded"});  // by name: stored as the id
  auto second = Submit(s);
  EXPECT_EQ(second.spec().metadata().depends_on(0).job(), first.id());
  auto got = *controller_->Get(second.id(), false);
  EXPECT_EQ(got.state(), moe::v1::PENDING);
  EXPECT_EQ(got.waiting_reason(),
            "waiting for job " + first.id() + " to succeed (it is SCHEDULED)");
  JobSpec unknown = Spec("third", 1, 1);
  unknown.depends_on.push_back({"nope", "finished"});
  auto refused = controller_->Submit(SpecToProto(unknown));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("metadata.depends_on[0].job: no job 'nope'"),
            std::string::npos)
      << refused.status();
  JobSpec after_any = Spec("fourth", 1, 1);
  after_any.depends_on.push_back({first.id(), "finished"});
  auto fourth = Submit(after_any);
  Finish("a", a->Assignments()[0], false, "boom");  // first: restarts, still not finished
  EXPECT_EQ(State(second.id()), moe::v1::PENDING);
  ASSERT_TRUE(controller_->Cancel(first.id(), "", true).ok());
  controller_->SchedulePass();
  auto cancelled = *controller_->Get(second.id(), false);
  EXPECT_EQ(cancelled.state(), moe::v1::CANCELLED);
  EXPECT_NE(cancelled.message().find("dependency job " + first.id() + " ended CANCELLED"),
            std::string::npos)
      << cancelled.message();
  EXPECT_NE(State(fourth.id()), moe::v1::PENDING) << "finished is enough for it";
  EXPECT_NE(State(fourth.id()), moe::v1::CANCELLED);
}

// A name in depends_on is one of the submitter's own jobs: bob's `prep` does not start alice's
// `train`, and a name only another user has is refused, pointing at ids.
TEST_F(ControllerTest, ADependencyByNameIsAmongTheSubmittersOwnJobs) {
  AddWorker("a", "r0", "n0");
  auto bobs = controller_->Submit(SpecToProto(Spec("prep", 1, 1)), "", "bob");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  JobSpec train = Spec("train", 1, 1);
  train.depends_on.push_back({"prep", "succeeded"});
  auto refused = controller_->Submit(SpecToProto(train), "", "alice");
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("no job 'prep' of yours"), std::string::npos)
      << refused.status();
  JobSpec her_prep = Spec("prep", 1, 1);
  her_prep.checkpoint.dir = "/tmp/ckpt-alice-prep";
  auto alices = controller_->Submit(SpecToProto(her_prep), "", "alice");
  ASSERT_TRUE(alices.ok()) << alices.status();
  auto hers = controller_->Submit(SpecToProto(train), "", "alice");
  ASSERT_TRUE(hers.ok()) << hers.status();
  EXPECT_EQ(hers->spec().metadata().depends_on(0).job(), alices->id()) << "hers, not bob's newer";
  train.depends_on[0].job = bobs->id();  // by id: another user's job, named on purpose
  train.checkpoint.dir = "/tmp/ckpt-train-2";
  auto by_id = controller_->Submit(SpecToProto(train), "", "alice");
  EXPECT_TRUE(by_id.ok()) << by_id.status();
}

TEST_F(ControllerTest, PriorityFirstAndASmallerJobMayGoFirstWhenItFits) {
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  auto running =
      Submit(Spec("running", 1, 1, /*priority=*/9));  // takes one worker (above big: not preempted)
  auto big = Submit(Spec("big", 2, 1, /*priority=*/5));      // cannot fit now (one free)
  auto small = Submit(Spec("small", 1, 1, /*priority=*/0));  // fits: goes first
  EXPECT_EQ(State(big.id()), moe::v1::PENDING);
  EXPECT_EQ(State(small.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->List({moe::v1::PENDING, moe::v1::RESTARTING, moe::v1::PREEMPTED}).size(),
            1u)
      << "one job waits";
  const std::string why = controller_->Get(big.id(), false)->waiting_reason();
  EXPECT_FALSE(why.empty()) << "a pending job says why it waits";
  EXPECT_TRUE(controller_->Get(small.id(), false)->waiting_reason().empty());
  std::printf("pending because: %s\n", why.c_str());
  (void)running;
}

TEST_F(ControllerTest, DrainedWorkersTakeNoNewWork) {
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  ASSERT_TRUE(controller_->SetDrained("a", true).ok());
  auto j1 = Submit(Spec("one", 1, 1));
  auto j2 = Submit(Spec("two", 1, 1));
  EXPECT_EQ(State(j1.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(State(j2.id()), moe::v1::PENDING);
  EXPECT_EQ(controller_->Get(j1.id(), false)->placement(0).worker(), "b");
  ASSERT_TRUE(controller_->SetDrained("a", false).ok());
  controller_->Tick();
  EXPECT_EQ(State(j2.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->SetDrained("nope", true).status().code(), StatusCode::kNotFound);
}

// A node agent sends its ranks' step reports of one moment in one message (StepReports): each is
// kept as a report alone would be, the whole message is refused when one of them is another agent's
// rank, and more than 64 in one message are refused naming the field.
TEST_F(ControllerTest, ANodesStepReportsComeInOneMessage) {
  auto& ch = channels_["node0"];
  ch = std::make_unique<FakeChannel>();
  ASSERT_TRUE(controller_->Register(NodeAgent(2), ch.get()).ok());
  const auto job = Submit(Spec("j", 2, 2));
  const std::vector<moe::v1::Assignment> as = ch->Assignments();
  ASSERT_EQ(as.size(), 2u);
  moe::v1::WorkerMessage both;
  for (const auto& a : as) *both.mutable_steps()->add_reports() = StepMessage(a, 4).step();
  ASSERT_TRUE(controller_->OnWorkerMessage("node0", both).ok());
  controller_->FoldSteps();
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::RUNNING);
  EXPECT_EQ(j.last_metrics().step(), 4) << "the step every rank reported, in one message";
  AddWorker("intruder", "r0", "n9");
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", both).code(), StatusCode::kPermissionDenied);
  moe::v1::WorkerMessage flood;
  for (int i = 0; i < 65; ++i) *flood.mutable_steps()->add_reports() = StepMessage(as[0], 5).step();
  const Status st = controller_->OnWorkerMessage("node0", flood);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("steps: 65 reports in one message; at most 64"), std::string::npos)
      << st;
}

// One agent per node (issue 39): its devices are placed and listed as workers of their own, while
// its one stream carries their assignments and reports and its one lease keeps them all.
TEST_F(ControllerTest, ANodeAgentsDevicesAreWorkersOnOneStreamAndOneLease) {
  auto& ch = channels_["node0"];
  ch = std::make_unique<FakeChannel>();
  moe::v1::Register r = NodeAgent(4);
  auto reg = controller_->Register(r, ch.get());
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->name(), "node0");
  const std::vector<moe::v1::Worker> listed = controller_->Workers();
  ASSERT_EQ(listed.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(listed[static_cast<size_t>(i)].name(), "node0/" + std::to_string(i));
    EXPECT_EQ(listed[static_cast<size_t>(i)].agent(), "node0");
    EXPECT_EQ(listed[static_cast<size_t>(i)].device_index(), i);
    EXPECT_EQ(listed[static_cast<size_t>(i)].node(), "n0");
    EXPECT_EQ(listed[static_cast<size_t>(i)].rack(), "r0");
  }
  EXPECT_EQ(store_.LoadWorkers()->size(), 4u) << "every device stored with the agent's session";

  const auto job = Submit(Spec("j", 4, 4));
  AddWorker("intruder", "r0", "n9");
  const std::vector<moe::v1::Assignment> as = ch->Assignments();
  ASSERT_EQ(as.size(), 4u) << "the four ranks' assignments on the agent's one stream";
  std::set<int> devices;
  for (const auto& a : as) {
    devices.insert(a.device_index());
    EXPECT_EQ(a.worker(), "node0/" + std::to_string(a.device_index()));
    EXPECT_EQ(a.cpu_threads(), 2) << "the node's 8 cores over its 4 CPU slots";
  }
  EXPECT_EQ(devices, (std::set<int>{0, 1, 2, 3}));
  for (const auto& a : as) Step("node0", a, 1);
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
  moe::v1::WorkerMessage step;
  step.mutable_step()->set_job_id(as[0].job_id());
  step.mutable_step()->set_attempt(as[0].attempt());
  step.mutable_step()->set_rank(as[0].rank());
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", step).code(), StatusCode::kPermissionDenied);
  auto scope = controller_->RendezvousScope(reg->session());
  ASSERT_TRUE(scope.ok()) << scope.status();
  EXPECT_EQ(scope->size(), 4u) << "one prefix per busy device (here the same attempt's)";

  // The agent's heartbeats keep all four; a rank's end frees its device alone.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(1);
    Heartbeats();
    controller_->Tick();
  }
  for (const auto& w : controller_->Workers()) EXPECT_NE(w.state(), moe::v1::LOST) << w.name();
  Finish("node0", as[2], true);
  int busy = 0;
  for (const auto& w : controller_->Workers()) busy += w.state() == moe::v1::BUSY ? 1 : 0;
  EXPECT_EQ(busy, 3) << "the device whose rank ended is free, the others still run theirs";

  // Drained by the agent's name: every device.
  ASSERT_TRUE(controller_->SetDrained("node0", true).ok());
  for (const auto& w : controller_->Workers()) {
    if (w.agent() == "node0") {
      EXPECT_TRUE(w.drained()) << w.name();
    }
  }
  ASSERT_TRUE(controller_->SetDrained("node0", false).ok());

  // Silence past the lease loses every device at once, and the job restarts.
  LoseWorker("node0");
  for (const auto& w : controller_->Workers()) {
    if (w.agent() == "node0") {
      EXPECT_EQ(w.state(), moe::v1::LOST) << w.name();
    }
  }
  EXPECT_NE(State(job.id()), moe::v1::RUNNING);

  // It comes back with its session: the same four workers, live again.
  auto& ch2 = channels_["node0"];
  ch2 = std::make_unique<FakeChannel>();
  r.set_session(reg->session());
  ASSERT_TRUE(controller_->Register(r, ch2.get()).ok());
  for (const auto& w : controller_->Workers()) {
    if (w.agent() == "node0") {
      EXPECT_NE(w.state(), moe::v1::LOST) << w.name();
    }
  }
  EXPECT_EQ(controller_->Workers().size(), 5u) << "no device listed twice";
}

// A lease that ran out while the agent's stream stayed up (a partition that healed without breaking
// TCP, a herd that kept its beats from being heard): its next message is refused with "register
// again" (which ends the stream; the agent reconnects), never taken as a heartbeat of a lost worker
// (which left it LOST for as long as its stream lived: bench/load.py at 8,192 agents). A leaving
// agent's word still counts. It comes back live with its session.
TEST_F(ControllerTest, AnAgentLostWhileConnectedIsToldToRegisterAgain) {
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  LoseWorker("a");
  ASSERT_EQ(controller_->Workers().size(), 2u);
  auto state = [&](const std::string& name) {
    for (const auto& w : controller_->Workers())
      if (w.name() == name) return w.state();
    return moe::v1::WORKER_STATE_UNSPECIFIED;
  };
  ASSERT_EQ(state("a"), moe::v1::LOST);
  moe::v1::WorkerMessage hb;
  hb.mutable_heartbeat();
  const Status st = controller_->OnWorkerMessage("a", hb);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("worker a was declared lost"), std::string::npos) << st;
  EXPECT_NE(st.message().find("register again"), std::string::npos) << st;
  EXPECT_EQ(state("a"), moe::v1::LOST) << "a heartbeat does not bring a lost worker back";
  EXPECT_TRUE(controller_->OnWorkerMessage("b", hb).ok()) << "the live one is unaffected";
  moe::v1::WorkerMessage leaving;
  leaving.mutable_leaving()->set_reason("SIGTERM to moe-worker");
  EXPECT_TRUE(controller_->OnWorkerMessage("a", leaving).ok()) << "a leaving agent is heard";

  // It registers again with its session: live, heartbeats renew its lease again.
  moe::v1::Register r;
  r.set_name("a");
  r.set_rack("r0");
  r.set_node("n0");
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_session(sessions_["a"]);
  auto& ch = channels_["a"];
  ch = std::make_unique<FakeChannel>();
  ASSERT_TRUE(controller_->Register(r, ch.get()).ok());
  EXPECT_NE(state("a"), moe::v1::LOST);
  EXPECT_TRUE(controller_->OnWorkerMessage("a", hb).ok());
}

TEST_F(ControllerTest, ANodeAgentsRegistrationIsCheckedFieldByField) {
  FakeChannel ch;
  moe::v1::Register r;
  r.set_name("node1");
  r.set_rack("r0");
  r.set_node("n1");
  r.set_device("cuda:0");
  for (const char* d : {"cuda:0", "cuda:1", "cuda:1"}) r.add_devices(d);
  auto reg = controller_->Register(r, &ch);
  EXPECT_EQ(reg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reg.status().message().find("devices"), std::string::npos) << reg.status();
  r.set_devices(2, "cuda:2");
  r.set_device("cuda:5");
  EXPECT_EQ(controller_->Register(r, &ch).status().code(), StatusCode::kInvalidArgument)
      << "the first device is the registration's `device`";
  r.set_device("cuda:0");
  auto* run = r.add_running();
  run->set_job_id("j");
  run->set_device_index(3);
  EXPECT_EQ(controller_->Register(r, &ch).status().code(), StatusCode::kInvalidArgument)
      << "a running rank on a device the agent does not have";
  r.clear_running();
  ASSERT_TRUE(controller_->Register(r, &ch).ok());
  EXPECT_EQ(controller_->Workers().size(), 3u);
}

TEST_F(ControllerTest, StragglerIsFlaggedAfterTheWindow) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto* c = AddWorker("c", "r0", "n2");
  auto job = Submit(Spec("j", 3, 1));
  std::map<std::string, moe::v1::Assignment> asg = {
      {"a", a->Assignments()[0]}, {"b", b->Assignments()[0]}, {"c", c->Assignments()[0]}};
  for (int s = 1; s <= 4; ++s) {
    for (auto& [w, x] : asg) Step(w, x, s, w == "c" ? 0.5 : 0.1);  // c is five times slower
  }
  auto j = *controller_->Get(job.id(), true);
  ASSERT_EQ(j.last_metrics().stragglers_size(), 1);
  EXPECT_EQ(j.last_metrics().stragglers(0), asg["c"].rank());
  bool event = false;
  for (const auto& e : j.events())
    event |= e.type() == "Straggler" && e.message().find("on c") != std::string::npos;
  EXPECT_TRUE(event);
}

}  // namespace
}  // namespace moe::controller
