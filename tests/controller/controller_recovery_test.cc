// The controller while its store refuses writes, and its recovery after a restart (epochs, clocks,
// stored jobs it cannot read).
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

TEST_F(ControllerTest, ARequestTheStoreRefusesFailsAndChangesNothing) {
  auto* a = AddWorker("a", "r0", "n0");
  store_.fail_writes = true;
  auto refused = controller_->Submit(SpecToProto(Spec("j", 1, 1)));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(controller_->List({}).empty()) << "an unstored job was never acknowledged";
  EXPECT_TRUE(a->Assignments().empty());
  store_.fail_writes = false;
  auto job = Submit(Spec("j", 1, 1));
  store_.fail_writes = true;
  EXPECT_EQ(controller_->Cancel(job.id()).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(a->Cancels(), 0) << "no rank hears of a cancel that was not stored";
  store_.fail_writes = false;
  ASSERT_TRUE(controller_->Cancel(job.id()).ok());
  EXPECT_EQ(a->Cancels(), 1);
}

TEST_F(ControllerTest, APlacementTheStoreRefusesWaitsInTheQueueForTheNextTick) {
  auto* a = AddWorker("a", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("a", true).ok());
  auto job = Submit(Spec("j", 1, 1));
  store_.fail_writes = true;
  EXPECT_EQ(controller_->SetDrained("a", false).status().code(), StatusCode::kUnavailable)
      << "an undrain the store refuses is refused";
  EXPECT_EQ(controller_->Workers()[0].state(), moe::v1::DRAINED);
  store_.fail_writes = false;
  ASSERT_TRUE(controller_->SetDrained("a", false).ok());
  store_.fail_writes = true;
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::PENDING);
  EXPECT_TRUE(a->Assignments().empty()) << "no worker hears of an unstored placement";
  EXPECT_EQ(controller_->Workers()[0].state(), moe::v1::IDLE);
  store_.fail_writes = false;
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  ASSERT_EQ(a->Assignments().size(), 1u);
  EXPECT_EQ(a->Assignments()[0].attempt(), 1);
}

// A pass that places several jobs stores them in one write (one transaction: a burst of submits
// placed together waits for one fsync, not one each); a refused write leaves every one queued and
// no worker told, and the next pass places them all.
TEST_F(ControllerTest, APassStoresItsPlacementsInOneWriteAllOrNone) {
  std::vector<FakeChannel*> workers;
  for (int i = 0; i < 4; ++i) {
    const std::string name = "w" + std::to_string(i);
    workers.push_back(AddWorker(name, "r0", "n" + std::to_string(i)));
    ASSERT_TRUE(controller_->SetDrained(name, true).ok());
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(Submit(Spec("j" + std::to_string(i), 1, 1)).id());
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(controller_->SetDrained("w" + std::to_string(i), false).ok());
  for (const auto& id : ids) ASSERT_EQ(State(id), moe::v1::PENDING);
  store_.fail_writes = true;
  controller_->Tick();
  for (const auto& id : ids) EXPECT_EQ(State(id), moe::v1::PENDING) << id;
  for (auto* w : workers) EXPECT_TRUE(w->Assignments().empty()) << "told of an unstored placement";
  store_.fail_writes = false;
  const int before = store_.batches.load();
  controller_->Tick();
  EXPECT_EQ(store_.batches.load() - before, 1)
      << "the pass's 4 placements took more than one write";
  for (const auto& id : ids) EXPECT_EQ(State(id), moe::v1::SCHEDULED) << id;
  for (auto* w : workers) EXPECT_EQ(w->Assignments().size(), 1u);
  for (const auto& id : ids) EXPECT_EQ(EventCount(id, "Scheduled"), 1) << id;
}

TEST_F(ControllerTest, AFailureTheStoreRefusesStopsTheRanksAtOnceAndIsRecordedLater) {
  auto* a = AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2));
  store_.fail_writes = true;
  controller_->Disconnected("b", channels_["b"].get());
  EXPECT_EQ(a->Cancels(), 1) << "the surviving rank stops whether or not the failure is stored";
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED) << "memory follows the store";
  store_.fail_writes = false;
  controller_->Tick();
  auto j = *controller_->Get(job.id(), false);
  EXPECT_EQ(j.state(), moe::v1::RESTARTING);
  EXPECT_EQ(j.restarts(), 1);
  EXPECT_EQ(EventCount(job.id(), "AttemptFailed"), 1);
  controller_->Tick();
  EXPECT_EQ(EventCount(job.id(), "AttemptFailed"), 1) << "recorded once";
  EXPECT_EQ(controller_->Get(job.id(), false)->restarts(), 1);
}

TEST_F(ControllerTest, ASuccessTheStoreRefusesIsRecordedByALaterTick) {
  auto* a = AddWorker("a", "r0", "n0");
  auto job = Submit(Spec("j", 1, 1));
  store_.fail_writes = true;
  Finish("a", a->Assignments()[0], true);
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->Workers()[0].state(), moe::v1::IDLE) << "the worker is free either way";
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  store_.fail_writes = false;
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(EventCount(job.id(), "Succeeded"), 1);
}

TEST(ControllerRecovery, RunningJobCarriesOnWhenItsRanksReportBackOrRestartsWhenTheyDoNot) {
  FakeClock clock;
  MemoryStateStore store;
  auto metrics = std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(),
                                                     clock, StragglerOptions{}, 60, "t");
  ControllerConfig opt;
  std::string id1, id2;
  moe::v1::Assignment a1, a2;
  std::map<std::string, std::string> sessions;
  {
    Controller c(store, clock, *metrics, opt);
    ASSERT_TRUE(c.Recover().ok());
    FakeChannel ch1, ch2;
    moe::v1::Register r;
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_rack("r0");
    r.set_node("n0");
    r.set_name("w1");
    auto reg1 = c.Register(r, &ch1);
    ASSERT_TRUE(reg1.ok());
    sessions["w1"] = reg1->session();
    r.set_name("w2");
    auto reg2 = c.Register(r, &ch2);
    ASSERT_TRUE(reg2.ok());
    sessions["w2"] = reg2->session();
    id1 = c.Submit(SpecToProto(Spec("one", 1, 1)))->id();
    id2 = c.Submit(SpecToProto(Spec("two", 1, 1)))->id();
    a1 = ch1.Assignments()[0];
    a2 = ch2.Assignments()[0];
    moe::v1::WorkerMessage m;
    m.mutable_step()->set_job_id(a1.job_id());
    m.mutable_step()->set_attempt(1);
    m.mutable_step()->mutable_metrics()->set_step(1);
    EXPECT_TRUE(c.OnWorkerMessage("w1", m).ok());
    c.FoldSteps();  // as its next tick would
  }                 // the controller dies
  Controller c(store, clock, *metrics, opt);
  ASSERT_TRUE(c.Recover().ok());
  ASSERT_TRUE(c.Get(id1, false).ok()) << "jobs survive the restart";
  FakeChannel ch1, ch2;
  moe::v1::Register r;
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_rack("r0");
  r.set_node("n0");
  r.set_name(a1.job_id() == id1 ? "w1" : "w2");
  auto* run = r.add_running();
  run->set_job_id(id1);
  run->set_attempt(1);
  run->set_rank(0);
  FakeChannel intruder;
  moe::v1::Register takeover = r;
  takeover.set_session("");
  EXPECT_EQ(c.Register(takeover, &intruder).status().code(), StatusCode::kPermissionDenied)
      << "after a restart a name stays held by its session";
  r.set_session(sessions[r.name()]);
  ASSERT_TRUE(c.Register(r, &ch1).ok());
  // The other worker comes back without its rank (it was restarted too).
  moe::v1::Register r2;
  r2.set_device("cpu");
  r2.set_memory_bytes(int64_t{64} << 30);
  r2.set_rack("r0");
  r2.set_node("n0");
  r2.set_name(a1.job_id() == id1 ? "w2" : "w1");
  r2.set_session(sessions[r2.name()]);
  ASSERT_TRUE(c.Register(r2, &ch2).ok());
  // Its worker was held for the attempt through the restart, so coming back without the rank loses
  // the rank at once (not at the end of the grace) and gives the worker no new work before that.
  EXPECT_EQ(c.Get(id2, false)->state(), moe::v1::RESTARTING)
      << moe::v1::JobState_Name(c.Get(id2, false)->state());
  for (int i = 0; i < 11; ++i) {  // past the reconnect grace, heart-beating
    clock.Advance(1);
    moe::v1::WorkerMessage hb;
    hb.mutable_heartbeat();
    EXPECT_TRUE(c.OnWorkerMessage("w1", hb).ok());
    EXPECT_TRUE(c.OnWorkerMessage("w2", hb).ok());
    c.Tick();
  }
  EXPECT_EQ(c.Get(id1, false)->state(), moe::v1::RUNNING) << "its rank reported back";
  EXPECT_EQ(ch1.Cancels(), 0);
  auto j2 = *c.Get(id2, true);
  EXPECT_EQ(j2.restarts(), 1) << "a rank that did not come back restarts the job";
  EXPECT_TRUE(j2.state() == moe::v1::SCHEDULED || j2.state() == moe::v1::RESTARTING)
      << moe::v1::JobState_Name(j2.state());
}

// An absolute dataset that is missing under a root a worker reported is refused at submit also
// right after that worker registered, before any tick walked the workers (the view of the roots was
// refreshed only by that walk, once a second or less often: a submit in between was not checked),
// and not refused by a worker drained just before.
TEST(ControllerAdmission, AMissingDatasetIsRefusedRightAfterItsWorkerRegistered) {
  FakeClock clock;
  MemoryStateStore store;
  auto metrics = std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(),
                                                     clock, StragglerOptions{}, 60, "t");
  ControllerConfig opt;
  char tmpl[] = "/tmp/moe-roots.XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  std::ofstream(root + "/present.idx") << "x";  // a non-empty root: visible to the controller
  Controller c(store, clock, *metrics, opt);
  ASSERT_TRUE(c.Recover().ok());
  FakeChannel ch;
  moe::v1::Register r;
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_rack("r0");
  r.set_node("n0");
  r.set_name("w1");
  r.add_data_roots(root);
  ASSERT_TRUE(c.Register(r, &ch).ok());
  JobSpec missing = Spec("missing", 1, 1);
  missing.data.path = root + "/absent";
  const auto refused = c.Submit(SpecToProto(missing));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find(root + "/absent.idx does not exist"), std::string::npos)
      << refused.status();
  JobSpec present = Spec("present", 1, 1);
  present.data.path = root + "/present";
  EXPECT_TRUE(c.Submit(SpecToProto(present)).ok()) << "the dataset that is there passes";
  // Drained, its roots no longer judge a submit, at once (not at the next tick's walk): the
  // dataset may lie on a worker the controller cannot see.
  ASSERT_TRUE(c.SetDrained("w1", true, "").ok());
  JobSpec elsewhere = Spec("elsewhere", 1, 1);
  elsewhere.data.path = root + "/absent";
  EXPECT_TRUE(c.Submit(SpecToProto(elsewhere)).ok()) << "a drained worker's root judged a submit";
  ASSERT_TRUE(c.SetDrained("w1", false, "").ok());
  JobSpec again = Spec("again", 1, 1);
  again.data.path = root + "/absent";
  EXPECT_EQ(c.Submit(SpecToProto(again)).status().code(), StatusCode::kFailedPrecondition)
      << "undrained, its root judges again";
  std::filesystem::remove_all(root);
}

// A restarted controller admitting a herd: the reconnect grace does not run out while the
// registration gate has registrations in flight or refused agents still due, and runs in full once
// the gate is quiet (16,384 agents back after a restart take
// longer than the 10 s grace; controller_herd_test has them at full size).
TEST(ControllerRecovery, TheReconnectGraceWaitsForTheHerdTheGateIsAdmitting) {
  FakeClock clock;
  MemoryStateStore store;
  auto metrics = std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(),
                                                     clock, StragglerOptions{}, 60, "t");
  ControllerConfig opt;
  std::string id;
  {
    Controller c(store, clock, *metrics, opt);
    ASSERT_TRUE(c.Recover().ok());
    FakeChannel ch;
    moe::v1::Register r;
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_rack("r0");
    r.set_node("n0");
    r.set_name("w1");
    ASSERT_TRUE(c.Register(r, &ch).ok());
    id = c.Submit(SpecToProto(Spec("one", 1, 1)))->id();
    ASSERT_EQ(ch.Assignments().size(), 1u);
  }  // the controller dies
  Controller c(store, clock, *metrics, opt);
  ASSERT_TRUE(c.Recover().ok());
  const moe::v1::JobState before = c.Get(id, false)->state();
  // A herd at the gate: 32 registrations in flight (they hold the grace however long they take) and
  // refused agents told to come back about 0.3 s ahead (the gate runs on the controller's clock).
  RegistrationGate& gate = c.registrations();
  std::vector<double> admitted;
  for (int i = 0; i < RegistrationGate::kMaxInFlight; ++i) admitted.push_back(*gate.Begin());
  while (gate.Backlog() < 0.3) ASSERT_FALSE(gate.Begin().ok());
  for (int i = 0; i < 3 * static_cast<int>(opt.reconnect_grace_seconds); ++i) {
    clock.Advance(1);
    c.Tick();
  }
  EXPECT_EQ(c.Get(id, false)->state(), before)
      << "three graces passed while registrations were in flight: the herd was not over";
  for (double a : admitted) gate.End(a);  // the herd is over now
  EXPECT_EQ(gate.Backlog(), 0);
  for (int i = 0; i < static_cast<int>(opt.reconnect_grace_seconds) - 2; ++i) {
    clock.Advance(1);
    c.Tick();
  }
  EXPECT_EQ(c.Get(id, false)->state(), before)
      << "the grace runs in full from the herd's last registration";
  for (int i = 0; i < 4; ++i) {
    clock.Advance(1);
    c.Tick();
  }
  auto j = *c.Get(id, true);
  EXPECT_EQ(j.restarts(), 1) << "once the herd is admitted, a rank that did not come back restarts";
}

// A controller restart during STOPPING: the stop goes on. The reconnecting worker is told to stop
// again and stays busy; the rank's end then makes the job CANCELLED with the stop's checkpoint.
TEST(ControllerRecovery, AStoppingJobStaysStoppingAndEndsWhenItsRankEnds) {
  FakeClock clock;
  MemoryStateStore store;
  auto metrics = std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(),
                                                     clock, StragglerOptions{}, 60, "t");
  ControllerConfig opt;
  std::string id, session;
  moe::v1::Register r;
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_rack("r0");
  r.set_node("n0");
  r.set_name("w1");
  {
    Controller c(store, clock, *metrics, opt);
    ASSERT_TRUE(c.Recover().ok());
    FakeChannel ch;
    auto reg = c.Register(r, &ch);
    ASSERT_TRUE(reg.ok());
    session = reg->session();
    id = c.Submit(SpecToProto(Spec("one", 1, 1)))->id();
    ASSERT_EQ(c.Cancel(id)->state(), moe::v1::STOPPING);
  }  // the controller dies while the rank stops
  Controller c(store, clock, *metrics, opt);
  ASSERT_TRUE(c.Recover().ok());
  EXPECT_EQ(c.Get(id, false)->state(), moe::v1::STOPPING);
  FakeChannel ch;
  r.set_session(session);
  auto* run = r.add_running();
  run->set_job_id(id);
  run->set_attempt(1);
  run->set_rank(0);
  ASSERT_TRUE(c.Register(r, &ch).ok());
  EXPECT_EQ(ch.Cancels(), 1) << "told to stop again";
  EXPECT_EQ(c.Workers()[0].state(), moe::v1::BUSY);
  moe::v1::WorkerMessage m;
  auto* f = m.mutable_finished();
  f->set_job_id(id);
  f->set_attempt(1);
  f->set_rank(0);
  f->set_failure_class(moe::v1::FAILURE_STOPPED);
  f->set_checkpoint_step(9);
  ASSERT_TRUE(c.OnWorkerMessage("w1", m).ok());
  auto j = *c.Get(id, false);
  EXPECT_EQ(j.state(), moe::v1::CANCELLED) << j.message();
  EXPECT_EQ(j.checkpoint_step(), 9);
  EXPECT_EQ(c.Workers()[0].state(), moe::v1::IDLE);
}

}  // namespace
}  // namespace moe::controller

namespace moe::controller {
namespace {

struct Bare {
  FakeClock clock;
  MemoryStateStore store;
  std::unique_ptr<MetricsAggregator> metrics = std::make_unique<MetricsAggregator>(
      std::make_shared<prometheus::Registry>(), clock, StragglerOptions{}, 60, "t");
};

// A stored job this controller cannot read is kept and shown as INVALID with the reason, never
// dropped, run or expired; the record in the store stays as it was.
TEST(ControllerRecovery, AStoredJobThatNoLongerValidatesIsKeptAsInvalid) {
  Bare b;
  moe::v1::Job bad;
  bad.set_id("old-abcde");
  bad.set_state(moe::v1::PENDING);
  bad.set_updated_at(b.clock.Now());
  *bad.mutable_spec() = SpecToProto(Spec("old", 1, 1));
  (*bad.mutable_spec()->mutable_metadata()->mutable_labels())["team"] = "research";
  bad.mutable_spec()->mutable_spec()->mutable_model()->mutable_moe()->set_top_k(
      0);  // no longer valid
  ASSERT_TRUE(b.store.PutJob(bad).ok());
  ControllerConfig config;
  config.finished_job_retention_seconds = 1;
  Controller c(b.store, b.clock, *b.metrics, config);
  ASSERT_TRUE(c.Recover().ok());
  auto got = c.Get("old-abcde", false);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), moe::v1::INVALID);
  EXPECT_NE(got->message().find("spec.model.moe.top_k"), std::string::npos) << got->message();
  moe::v1::ListJobsRequest by_label;  // still found by what its record says
  by_label.set_label_selector("team=research");
  auto listed = c.ListPage(by_label);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs_size(), 1);
  EXPECT_EQ(listed->jobs(0).id(), "old-abcde");
  b.clock.Advance(3600);
  c.Tick();
  EXPECT_TRUE(c.Get("old-abcde", false).ok()) << "an INVALID job is never expired";
  EXPECT_EQ((*b.store.LoadJobs())[0].state(), moe::v1::PENDING)
      << "the stored record is left as it was";
}

// A clock far past everything stored would expire at once what the retention keeps for weeks.
TEST(ControllerRecovery, AClockFarAheadOfTheStoredStateIsRefusedUnlessAllowed) {
  Bare b;
  moe::v1::Job done;
  done.set_id("done-abcde");
  done.set_state(moe::v1::SUCCEEDED);
  done.set_updated_at(b.clock.Now());
  *done.mutable_spec() = SpecToProto(Spec("done", 1, 1));
  ASSERT_TRUE(b.store.PutJob(done).ok());
  b.clock.Advance(40 * 86400.0);
  ControllerConfig config;
  Controller refused(b.store, b.clock, *b.metrics, config);
  const Status st = refused.Recover();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("40 days past the newest stored change"), std::string::npos) << st;
  config.allow_clock_jump = true;
  Controller allowed(b.store, b.clock, *b.metrics, config);
  EXPECT_TRUE(allowed.Recover().ok());
}

// Another controller took the state (a higher stored epoch): this one says so and stops.
TEST(ControllerRecovery, AControllerThatFindsAHigherEpochStops) {
  Bare b;
  Controller c(b.store, b.clock, *b.metrics, ControllerConfig{});
  ASSERT_TRUE(c.Recover().ok());
  c.Tick();
  EXPECT_EQ(c.Fenced(), "");
  b.store.SetStoredEpoch(7);
  b.clock.Advance(6);
  c.Tick();
  EXPECT_NE(c.Fenced().find("stored fencing epoch 7 > this one's 1"), std::string::npos)
      << c.Fenced();
}

}  // namespace
}  // namespace moe::controller
