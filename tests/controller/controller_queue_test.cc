// The controller: priorities and preemption, priority classes, queues with quotas, borrowing and
// reclaiming, the queues file.
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

TEST_F(ControllerTest,
       AHigherPriorityJobPreemptsTheYoungestLowestPriorityJobWhichResumesWithoutARestart) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto* c = AddWorker("c", "r0", "n2");
  auto mid = Submit(Spec("mid", 1, 1, /*priority=*/5));  // on one worker
  clock_.Advance(1);
  auto older = Submit(Spec("older", 1, 1, /*priority=*/0));  // one more
  clock_.Advance(1);
  auto young = Submit(Spec("young", 1, 1, /*priority=*/0));  // the last: the cluster is full
  for (const auto& id : {mid.id(), older.id(), young.id()})
    ASSERT_EQ(State(id), moe::v1::SCHEDULED) << id;
  clock_.Advance(1);
  auto same = Submit(Spec("same", 1, 1, /*priority=*/0));
  EXPECT_EQ(State(same.id()), moe::v1::PENDING) << "an equal priority preempts nothing";
  EXPECT_EQ(State(young.id()), moe::v1::SCHEDULED);
  auto high = Submit(Spec("high", 1, 1, /*priority=*/10));
  // The victim: the lowest priority (not mid), of those the fewest ranks, then the youngest.
  EXPECT_EQ(State(young.id()), moe::v1::PREEMPTED)
      << controller_->Get(young.id(), false)->message();
  EXPECT_EQ(State(older.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(State(mid.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(State(high.id()), moe::v1::PENDING);
  EXPECT_NE(controller_->Get(high.id(), false)->waiting_reason().find("preempting " + young.id()),
            std::string::npos)
      << controller_->Get(high.id(), false)->waiting_reason();
  EXPECT_NE(controller_->Get(same.id(), false)->waiting_reason().find("held: " + high.id()),
            std::string::npos)
      << "what the preemption frees is the preemptor's: "
      << controller_->Get(same.id(), false)->waiting_reason();
  // The victim's rank checkpoints and stops; the high job takes its worker.
  std::map<std::string, FakeChannel*> by_job;
  for (auto* ch : {a, b, c}) by_job[ch->Assignments().back().job_id()] = ch;
  FakeChannel* victim = by_job[young.id()];
  ASSERT_TRUE(victim->sent.back().has_cancel());
  EXPECT_FALSE(victim->sent.back().cancel().now()) << "a preempted rank checkpoints";
  Finish(victim == a   ? "a"
         : victim == b ? "b"
                       : "c",
         victim->Assignments().back(), false, "stopped after step 7 (asked to stop)");
  EXPECT_EQ(State(high.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(victim->Assignments().back().job_id(), high.id());
  auto y = *controller_->Get(young.id(), true);
  EXPECT_EQ(y.state(), moe::v1::PREEMPTED);
  EXPECT_EQ(y.restarts(), 0) << "a preemption uses no restart";
  EXPECT_EQ(EventCount(young.id(), "Preempted"), 1);
  EXPECT_EQ(EventCount(high.id(), "Preempting"), 1);
  // When the high job ends, the preempted one runs again (ahead of `same`: it is older).
  Finish(victim == a ? "a" : victim == b ? "b" : "c", victim->Assignments().back(), true);
  EXPECT_EQ(State(high.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(State(young.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->Get(young.id(), false)->attempt(), 2);
  EXPECT_TRUE(victim->Assignments().back().resume());
}

// A pass decides once for the queued jobs of one shape, queue and priority, and afresh after any
// placement: B and D (2 ranks) wait alike only while nothing was placed between them.
TEST_F(ControllerTest, JobsOfOneShapeWaitAlikeUntilAPlacementChangesWhatIsFree) {
  for (const char* w : {"w0", "w1", "w2"}) AddWorker(w, "r0", w);
  auto a = Submit(Spec("a", 2, 1));
  ASSERT_EQ(State(a.id()), moe::v1::SCHEDULED);
  // Submitted without a pass between them (as a burst between two ticks).
  const auto queue = [&](const std::string& name, int world) {
    clock_.Advance(1);
    auto j = controller_->Submit(SpecToProto(Spec(name, world, 1)));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : moe::v1::Job();
  };
  auto b = queue("b", 2), c = queue("c", 1), d = queue("d", 2), d2 = queue("d2", 2);
  controller_->SchedulePass();  // one pass: b waits, c takes the last worker, d and d2 wait
  EXPECT_EQ(State(c.id()), moe::v1::SCHEDULED);
  const auto why = [&](const moe::v1::Job& j) {
    return controller_->Get(j.id(), false)->waiting_reason();
  };
  EXPECT_NE(why(b).find("1 are free"), std::string::npos) << why(b);
  EXPECT_NE(why(d).find("0 are free"), std::string::npos)
      << "decided after c's placement: " << why(d);
  EXPECT_EQ(why(d2), why(d)) << "the same shape, nothing placed between them";
}

// A preemption that ends without placing its job (a victim's worker was lost meanwhile: the job no
// longer fits the cluster) holds nothing: the worker its other victim freed goes to a job waiting
// behind it.
TEST_F(ControllerTest, APreemptionThatEndsUnplacedHoldsNoWorker) {
  auto* a = AddWorker("a", "r0", "n0");
  AddWorker("b", "r0", "n1");
  auto low1 = Submit(Spec("low1", 1, 1));
  clock_.Advance(1);
  auto low2 = Submit(Spec("low2", 1, 1));
  clock_.Advance(1);
  auto waiting = Submit(Spec("waiting", 1, 1));  // the cluster is full
  clock_.Advance(1);
  auto high = Submit(Spec("high", 2, 1, /*priority=*/10));
  ASSERT_EQ(State(low1.id()), moe::v1::PREEMPTED);
  ASSERT_EQ(State(low2.id()), moe::v1::PREEMPTED);
  const size_t assigned = a->Assignments().size();
  Finish("a", a->Assignments().back(), false, "stopped after step 3 (asked to stop)");
  EXPECT_EQ(State(waiting.id()), moe::v1::PENDING) << "a is held for high, whose other victim runs";
  EXPECT_EQ(a->Assignments().size(), assigned);
  LoseWorker("b");  // high's other victim goes with its worker: high cannot fit any more
  controller_->SchedulePass();
  EXPECT_EQ(State(high.id()), moe::v1::PENDING);
  const std::string why = controller_->Get(high.id(), false)->waiting_reason();
  EXPECT_NE(why.find("waiting for capacity"), std::string::npos) << why;
  // Worker a runs the oldest job of those waiting behind high (the preempted one it ran resumes).
  ASSERT_EQ(a->Assignments().size(), assigned + 1) << "a is held for nobody";
  const std::string next = a->Assignments().back().job_id();
  EXPECT_NE(next, high.id());
  EXPECT_EQ(State(next), moe::v1::SCHEDULED);
}

TEST_F(ControllerTest, PriorityClassesSetThePriorityAndOnlyAClassCanOptOutOfPreemption) {
  config_.priority_classes = {{"production", {1000, /*preemptible=*/false}},
                              {"best-effort", {-10, true}}};
  Make();
  AddWorker("a", "r0", "n0");
  JobSpec prod = Spec("prod", 1, 1);
  prod.priority_class = "production";
  auto p = Submit(prod);
  EXPECT_EQ(p.spec().metadata().priority(), 1000) << "the class's priority";
  ASSERT_EQ(State(p.id()), moe::v1::SCHEDULED);
  auto urgent = Submit(Spec("urgent", 1, 1, /*priority=*/5000));
  EXPECT_EQ(State(p.id()), moe::v1::SCHEDULED) << "a never-preempted class is not stopped";
  EXPECT_EQ(State(urgent.id()), moe::v1::PENDING);
  JobSpec typo = Spec("typo", 1, 1);
  typo.priority_class = "prod";
  auto t = controller_->Submit(SpecToProto(typo));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find(
                "metadata.priority_class: unknown class 'prod' (known: best-effort, production"),
            std::string::npos)
      << t.status();
}

// Two queues of quota 2 in one cohort on 4 one-rank workers (Kueue's ClusterQueues and cohort).
class QueueTest : public ControllerTest {
 protected:
  // a_borrowing_limit < 0: none.
  void Start(int a_borrowing_limit = -1) {
    QueuesConfig q;
    q.queues = {QueueSpec{"a", "shared", {{"cpu", 2}}, {}, 1},
                QueueSpec{"b", "shared", {{"cpu", 2}}, {}, 1}};
    if (a_borrowing_limit >= 0) q.queues[0].borrowing_limit = {{"cpu", a_borrowing_limit}};
    q.default_queue = "a";
    config_.queues = q;
    Make();
    for (const char* w : {"w0", "w1", "w2", "w3"}) AddWorker(w, "r0", w);
  }
  moe::v1::Job SubmitTo(const std::string& queue, const std::string& name, int world = 1) {
    JobSpec s = Spec(name, world, 1);
    s.queue = queue;
    return Submit(s);
  }
  moe::v1::QueueResource Cpu(const std::string& queue) {
    for (const auto& q : controller_->Queues()) {
      if (q.name() == queue && q.resources_size() > 0) return q.resources(0);
    }
    return {};
  }
  // ListQueues' (admitted, pending) jobs of `queue`.
  std::pair<int64_t, int64_t> Counts(const std::string& queue) {
    for (const auto& q : controller_->Queues()) {
      if (q.name() == queue) return {q.admitted_jobs(), q.pending_jobs()};
    }
    ADD_FAILURE() << "no queue " << queue;
    return {};
  }
  // The worker running `job`, and it reports its rank stopped (or finished).
  void Stop(const std::string& job, bool ok) {
    for (auto& [name, ch] : channels_) {
      if (!ch->Assignments().empty() && ch->Assignments().back().job_id() == job) {
        Finish(name, ch->Assignments().back(), ok,
               ok ? "" : "stopped after step 3 (asked to stop)");
        return;
      }
    }
    ADD_FAILURE() << "no worker runs " << job;
  }
};

// /metrics shows what ListQueues (moectl get queues) shows, refreshed with the cluster's figures.
TEST_F(QueueTest, TheQueuesQuotaUsageBorrowingAndPendingJobsAreOnMetrics) {
  Start(/*a_borrowing_limit=*/1);
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1);
    SubmitTo("a", "a" + std::to_string(i));
  }
  clock_.Advance(1);
  Heartbeats();
  controller_->Tick();
  const std::map<std::string, std::string> a = {{"queue", "a"}, {"device", "cpu"}};
  EXPECT_EQ(Gauge("moe_queue_quota", a), 2.0);
  EXPECT_EQ(Gauge("moe_queue_usage", a), 3.0) << "its 2 and the 1 it may borrow";
  EXPECT_EQ(Gauge("moe_queue_borrowed", a), 1.0);
  EXPECT_EQ(Gauge("moe_queue_pending_jobs", {{"queue", "a"}}), 1.0);
  EXPECT_EQ(Gauge("moe_queue_quota", {{"queue", "b"}, {"device", "cpu"}}), 2.0);
  EXPECT_EQ(Gauge("moe_queue_usage", {{"queue", "b"}, {"device", "cpu"}}), 0.0);
  EXPECT_EQ(Gauge("moe_queue_pending_jobs", {{"queue", "b"}}), 0.0);
  EXPECT_EQ(Cpu("a").used(), 3) << "the same figures as ListQueues";
}

TEST_F(QueueTest, AQueueBorrowsIdleQuotaAndTheLenderReclaimsItUnderContention) {
  Start();
  std::vector<moe::v1::Job> a;
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1);
    a.push_back(SubmitTo("a", "a" + std::to_string(i)));
  }
  for (const auto& j : a)
    EXPECT_EQ(State(j.id()), moe::v1::SCHEDULED) << "b is idle: a borrows its 2";
  EXPECT_EQ(Cpu("a").used(), 4);
  EXPECT_EQ(Cpu("a").borrowed(), 2);
  EXPECT_EQ(Cpu("a").nominal(), 2);
  // b wants its quota back: the youngest borrower is preempted (equal priority: only a lender may).
  auto b0 = SubmitTo("b", "b0");
  EXPECT_EQ(State(a[3].id()), moe::v1::PREEMPTED);
  EXPECT_NE(controller_->Get(a[3].id(), false)
                ->message()
                .find("queue b reclaims the quota queue a borrowed"),
            std::string::npos)
      << controller_->Get(a[3].id(), false)->message();
  Stop(a[3].id(), false);
  EXPECT_EQ(State(b0.id()), moe::v1::SCHEDULED);
  const std::string why = controller_->Get(a[3].id(), false)->waiting_reason();
  EXPECT_NE(
      why.find(
          "over quota: cohort shared uses 4 of its 4 cpu ranks; queue a uses 3 of its 2 cpu ranks"),
      std::string::npos)
      << why;
  clock_.Advance(1);
  auto b1 = SubmitTo("b", "b1");
  EXPECT_EQ(State(a[2].id()), moe::v1::PREEMPTED);
  Stop(a[2].id(), false);
  EXPECT_EQ(State(b1.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(Cpu("a").used(), 2);
  EXPECT_EQ(Cpu("b").used(), 2);
  EXPECT_EQ(Cpu("a").borrowed(), 0);
  // Under contention each keeps its share: a third b job waits, and preempts nothing.
  clock_.Advance(1);
  auto b2 = SubmitTo("b", "b2");
  EXPECT_EQ(State(b2.id()), moe::v1::PENDING);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(State(a[i].id()), moe::v1::SCHEDULED);
  // b's jobs end: a's preempted ones borrow again, ahead of b2? No: b2 fits b's nominal quota and
  // goes first; a borrows what is left.
  Stop(b0.id(), true);
  EXPECT_EQ(State(b2.id()), moe::v1::SCHEDULED);
  Stop(b1.id(), true);
  Stop(b2.id(), true);
  EXPECT_EQ(State(a[2].id()), moe::v1::SCHEDULED);
  EXPECT_EQ(State(a[3].id()), moe::v1::SCHEDULED);
  EXPECT_EQ(controller_->Get(a[3].id(), false)->restarts(), 0) << "a reclaim uses no restart";
  for (const auto& q : controller_->Queues()) {
    if (q.name() == "a") {
      EXPECT_EQ(q.admitted_jobs(), 4);
    }
    if (q.name() == "b") {
      EXPECT_EQ(q.pending_jobs() + q.admitted_jobs(), 0);
    }
  }
}

// Two reclaims in flight: b0 waits for a3, b1 for a2. a2 stops first; its worker is b1's, not
// b0's (the older of equal priority), or b1 would find its victim gone and nothing free, and
// preempt a1, a job inside a's own quota (queues_test saw it, 2026-12-07).
TEST_F(QueueTest, AVictimsWorkerGoesToItsPreemptorNotToAnotherOneWaiting) {
  Start();
  std::vector<moe::v1::Job> a;
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(1);
    a.push_back(SubmitTo("a", "a" + std::to_string(i)));
  }
  clock_.Advance(1);
  auto b0 = SubmitTo("b", "b0");
  ASSERT_EQ(State(a[3].id()), moe::v1::PREEMPTED);
  clock_.Advance(1);
  auto b1 = SubmitTo("b", "b1");
  ASSERT_EQ(State(a[2].id()), moe::v1::PREEMPTED);
  Stop(a[2].id(), false);  // b1's victim stops first
  EXPECT_EQ(State(b1.id()), moe::v1::SCHEDULED) << controller_->Get(b1.id(), false)->message();
  EXPECT_EQ(State(b0.id()), moe::v1::PENDING) << "b0 waits for its own victim";
  const std::string why = controller_->Get(b0.id(), false)->waiting_reason();
  EXPECT_NE(why.find("preempting " + a[3].id()), std::string::npos) << why;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(State(a[i].id()), moe::v1::SCHEDULED) << a[i].id() << " is within a's quota";
    EXPECT_EQ(EventCount(a[i].id(), "Preempted"), 0) << a[i].id();
  }
  // Admitted: with ranks (a3's still stopping); pending: queued without them (a2, b0).
  EXPECT_EQ(Counts("a"), std::make_pair(int64_t{3}, int64_t{1}));
  EXPECT_EQ(Counts("b"), std::make_pair(int64_t{1}, int64_t{1}));
  Stop(a[3].id(), false);
  EXPECT_EQ(State(b0.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(Cpu("a").used(), 2);
  EXPECT_EQ(Cpu("b").used(), 2);
  EXPECT_EQ(Counts("a"), std::make_pair(int64_t{2}, int64_t{2}));
  EXPECT_EQ(Counts("b"), std::make_pair(int64_t{2}, int64_t{0}));
  Stop(b0.id(), true);
  EXPECT_EQ(Counts("b"), std::make_pair(int64_t{1}, int64_t{0})) << "b0 ended";
  EXPECT_EQ(Counts("a"), std::make_pair(int64_t{3}, int64_t{1})) << "a borrows b0's worker";
}

TEST_F(QueueTest, CompetingQueuesShareByTheirQuotaAndBorrowingHasALimit) {
  Start(/*a_borrowing_limit=*/1);
  // a runs 3 (one borrowed, its limit); then b wants its 2 back.
  std::vector<moe::v1::Job> a, b;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1);
    a.push_back(SubmitTo("a", "a" + std::to_string(i)));
  }
  EXPECT_EQ(State(a[2].id()), moe::v1::SCHEDULED) << "b is idle: a borrows 1 (its limit)";
  clock_.Advance(1);
  auto extra = SubmitTo("a", "a-extra");
  EXPECT_EQ(State(extra.id()), moe::v1::PENDING);
  const std::string why = controller_->Get(extra.id(), false)->waiting_reason();
  EXPECT_NE(why.find("over quota: queue a uses 3 of its 2 cpu ranks and may borrow 1"),
            std::string::npos)
      << why;
  for (int i = 0; i < 3; ++i) b.push_back(SubmitTo("b", "b" + std::to_string(i)));
  EXPECT_EQ(State(b[0].id()), moe::v1::SCHEDULED) << "the free worker";
  EXPECT_EQ(State(a[2].id()), moe::v1::PREEMPTED)
      << "b reclaims the one a borrowed; b1: "
      << controller_->Get(b[1].id(), false)->waiting_reason();
  Stop(a[2].id(), false);
  EXPECT_EQ(State(b[1].id()), moe::v1::SCHEDULED);
  EXPECT_EQ(State(b[2].id()), moe::v1::PENDING);
  EXPECT_EQ(Cpu("a").used(), 2);
  EXPECT_EQ(Cpu("b").used(), 2);
}

TEST_F(QueueTest, QueuesThatBorrowTogetherShareWhatIsLent) {
  // a and b have 1 each; c lends its 2. With FIFO a would take 3 of the 4 workers.
  config_.queues.queues = {QueueSpec{"a", "s", {{"cpu", 1}}, {}, 1},
                           QueueSpec{"b", "s", {{"cpu", 1}}, {}, 1},
                           QueueSpec{"c", "s", {{"cpu", 2}}, {}, 1}};
  Make();
  std::vector<moe::v1::Job> a, b;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1);
    a.push_back(SubmitTo("a", "a" + std::to_string(i)));
  }
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1);
    b.push_back(SubmitTo("b", "b" + std::to_string(i)));
  }
  for (const char* w : {"w0", "w1", "w2", "w3"}) AddWorker(w, "r0", w);
  EXPECT_EQ(Cpu("a").used(), 2);
  EXPECT_EQ(Cpu("b").used(), 2);
  EXPECT_EQ(State(a[2].id()), moe::v1::PENDING);
  EXPECT_EQ(State(b[2].id()), moe::v1::PENDING);
}

TEST_F(QueueTest, AQueueWithinItsQuotaReclaimsAlsoWhenWorkersNotQuotaRunShort) {
  Start();
  // w3 is gone: the cohort's quota has room (3 of 4 used) but the workers do not.
  LoseWorker("w3");
  std::vector<moe::v1::Job> a;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1);
    a.push_back(SubmitTo("a", "a" + std::to_string(i)));
  }
  EXPECT_EQ(Cpu("a").borrowed(), 1);
  auto b0 = SubmitTo("b", "b0");
  EXPECT_EQ(State(a[2].id()), moe::v1::PREEMPTED)
      << "b is within its quota: it takes back what a borrowed";
  Stop(a[2].id(), false);
  EXPECT_EQ(State(b0.id()), moe::v1::SCHEDULED);
  EXPECT_EQ(Cpu("a").used(), 2);
}

TEST_F(QueueTest, SubmitNamesTheQueueOrSaysWhyNot) {
  Start();
  auto j = SubmitTo("", "plain");
  EXPECT_EQ(j.spec().metadata().queue(), "a") << "the default queue";
  JobSpec s = Spec("typo", 1, 1);
  s.queue = "c";
  auto t = controller_->Submit(SpecToProto(s));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("metadata.queue: unknown queue 'c' (queues: a, b)"),
            std::string::npos)
      << t.status();
  JobSpec big = Spec("big", 5, 1);
  big.queue = "b";
  t = controller_->Submit(SpecToProto(big));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find(
                "needs 5 cpu ranks and queue b may use at most 4 (nominal quota 2, borrowing 2"),
            std::string::npos)
      << t.status();
}

TEST(QueuesConfig, TheFileIsCheckedFieldByField) {
  auto ok = ParseQueuesConfig(
      "queues:\n- {name: a, cohort: c, quota: {cpu: 2, cuda: 8}, borrowing_limit: {cpu: 1}}\n"
      "- {name: b, cohort: c, quota: {cpu: 2}, weight: 2}\ndefault_queue: b\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->queues[0].quota.at("cuda"), 8);
  EXPECT_EQ(ok->queues[1].weight, 2);
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"queues:\n- {name: a, quota: {tpu: 2}}\n", "queues[0].quota.tpu: unknown device type"},
           {"queues:\n- {name: a, quota: {cpu: -1}}\n",
            "queues[0].quota.cpu: must be in 0..1099511627776"},
           // Two quotas that would overflow a sum of int64s (2^63 - 1 twice in one cohort) are
           // refused.
           {"queues:\n- {name: a, cohort: c, quota: {cpu: 9223372036854775807}}\n- {name: b, "
            "cohort: c, quota: {cpu: 9223372036854775807}}\n",
            "queues[0].quota.cpu: must be in 0..1099511627776"},
           {"queues:\n- {name: a, borrowing_limit: {cuda: 9223372036854775807}}\n",
            "queues[0].borrowing_limit.cuda: must be in 0..1099511627776"},
           {"queues:\n- {name: a}\n- {name: a}\n", "queues[1].name: 'a' is also queues[0]"},
           {"queues:\n- {name: a}\ndefault_queue: z\n",
            "default_queue: 'z' is not one of the queues"},
           {"queues:\n- {name: a, wieght: 2}\n", "queues[0].wieght"},
           {"queues:\n- {name: a, weight: 0}\n", "queues[0].weight"},
           {"queues: []\n", "queues: lists no queue"},
       }) {
    auto r = ParseQueuesConfig(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status() << " for " << text;
  }
}

// A preempted job's ranks checkpoint as they stop, after their last step report: that stop
// checkpoint, from their final records, is the job's checkpoint_step (where it resumes), not the
// last periodic save.
TEST_F(ControllerTest, APreemptedJobsStopCheckpointIsItsNewest) {
  auto* a = AddWorker("a", "r0", "n0");
  auto low = Submit(Spec("low", 1, 1));
  Step("a", a->Assignments()[0], 61, 0.1, /*checkpoint_step=*/50);
  ASSERT_EQ(controller_->Get(low.id(), false)->checkpoint_step(), 50);
  auto high = Submit(Spec("high", 1, 1, /*priority=*/10));
  ASSERT_EQ(State(low.id()), moe::v1::PREEMPTED);
  moe::v1::WorkerMessage m;
  auto* f = m.mutable_finished();
  f->set_job_id(low.id());
  f->set_attempt(a->Assignments()[0].attempt());
  f->set_rank(0);
  f->set_exit_code(3);
  f->set_failure_class(moe::v1::FAILURE_STOPPED);
  f->set_checkpoint_step(62);
  f->set_message("stopped after step 62 (asked to stop)");
  Msg("a", m);
  EXPECT_EQ(State(high.id()), moe::v1::SCHEDULED);
  const moe::v1::Job j = *controller_->Get(low.id(), false);
  EXPECT_EQ(j.checkpoint_step(), 62) << "the stop checkpoint";
  EXPECT_EQ(j.checkpoint_time(), clock_.Now());
}

}  // namespace
}  // namespace moe::controller
