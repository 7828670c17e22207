// The scheduling pass and the attempt lifecycle on their own (no Controller, no gRPC): a job
// manager on an in-memory store, a worker registry with fake streams, and the pass that decides on
// values and acts once at its end (controller/queue_scheduler.h).
#include "controller/queue_scheduler.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "common/job_spec_proto.h"
#include "common/presets.h"
#include "controller/rendezvous.h"
#include "controller/state_store.h"

namespace moe::controller {
namespace {

class NullChannel : public WorkerChannel {
 public:
  void Send(const moe::v1::ControllerMessage& m) override { sent.push_back(m); }
  std::vector<moe::v1::ControllerMessage> sent;
};

JobSpec OneRank(const std::string& name, int64_t priority = 0, int world = 1) {
  JobSpec s;
  s.name = name;
  s.priority = priority;
  s.model = *ModelPreset("tiny");
  s.parallelism.world_size = world;
  s.parallelism.expert_parallel = 1;
  s.data.path = "data/fortunes";
  s.data.micro_batch_size = 1;
  s.data.global_batch_size = world;
  s.checkpoint.dir = "/tmp/pass-test-" + name;
  return s;
}

class PassTest : public ::testing::Test {
 protected:
  PassTest() { config_.restart_backoff_seconds = 10; }
  void AddWorker(const std::string& name) {
    moe::v1::Register r;
    r.set_name(name);
    r.set_rack("r0");
    r.set_node(name);
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    channels_.push_back(std::make_unique<NullChannel>());
    ASSERT_TRUE(workers_.Register(r, channels_.back().get()).ok());
  }
  JobEntry* Queue(const JobSpec& s) {
    auto e = jobs_.Create(jobs_.NewId(s.name), SpecToProto(s), s);
    EXPECT_TRUE(e.ok()) << e.status();
    (*e)->creating = false;  // stored: seen by the pass
    clock_.Advance(1);       // submit order
    return *e;
  }
  void Pass() {
    attempts_.NeedSchedule();
    scheduler_.Run();
  }
  moe::v1::JobState State(const JobEntry* e) { return e->job.state(); }

  FakeClock clock_;
  MemoryStateStore store_;
  ControllerConfig config_;
  JobManager jobs_{store_, clock_};
  WorkerRegistry workers_{clock_, 6};
  RendezvousStore rendezvous_;
  MetricsAggregator metrics_{std::make_shared<prometheus::Registry>(), clock_, StragglerOptions{},
                             60, "t"};
  AttemptLifecycle attempts_{jobs_, workers_, rendezvous_, metrics_, clock_, config_};
  QueueScheduler scheduler_{jobs_, workers_, attempts_, metrics_, clock_, config_};
  std::vector<std::unique_ptr<NullChannel>> channels_;
};

// A pass runs only when asked; it places what fits (priority first) and says why the rest waits,
// by class.
TEST_F(PassTest, APassPlacesWhatFitsAndClassesTheRest) {
  AddWorker("w0");
  AddWorker("w1");
  JobEntry* low = Queue(OneRank("low"));
  JobEntry* mid = Queue(OneRank("mid", 5));
  JobEntry* big = Queue(OneRank("big", 9, /*world=*/4));
  JobEntry* high = Queue(OneRank("high", 10));
  Pass();
  EXPECT_EQ(State(high), moe::v1::SCHEDULED);
  EXPECT_EQ(State(mid), moe::v1::SCHEDULED) << "backfilled past the job that cannot fit";
  EXPECT_EQ(State(low), moe::v1::PENDING);
  EXPECT_EQ(low->wait_class, WaitClass::kBusy) << low->waiting_reason;
  EXPECT_EQ(State(big), moe::v1::PENDING);
  EXPECT_EQ(big->wait_class, WaitClass::kCapacity) << big->waiting_reason;
  EXPECT_NE(big->waiting_reason.find("waiting for capacity"), std::string::npos);
  JobEntry* late = Queue(OneRank("late"));
  scheduler_.Run();
  EXPECT_EQ(late->wait_class, WaitClass::kNone) << "no pass was asked for: none ran";
  Pass();
  EXPECT_EQ(late->wait_class, WaitClass::kBusy) << late->waiting_reason;
}

// Two preemptors in one pass never choose the same victim: the first one's victim is planned to
// stop and is no candidate for the second, which takes the other; both victims stop when the pass
// acts.
TEST_F(PassTest, OnePassNeverChoosesOneVictimTwice) {
  AddWorker("w0");
  AddWorker("w1");
  JobEntry* a = Queue(OneRank("a"));
  JobEntry* b = Queue(OneRank("b"));
  Pass();
  ASSERT_EQ(State(a), moe::v1::SCHEDULED);
  ASSERT_EQ(State(b), moe::v1::SCHEDULED);
  JobEntry* h1 = Queue(OneRank("h1", 10));
  JobEntry* h2 = Queue(OneRank("h2", 10));
  Pass();
  EXPECT_EQ(State(a), moe::v1::PREEMPTED);
  EXPECT_EQ(State(b), moe::v1::PREEMPTED);
  ASSERT_EQ(h1->preempting.size(), 1u);
  ASSERT_EQ(h2->preempting.size(), 1u);
  EXPECT_NE(h1->preempting[0], h2->preempting[0]);
  EXPECT_EQ(h1->wait_class, WaitClass::kPreempting) << h1->waiting_reason;
}

// A dependency that can no longer hold cancels the job when the pass acts; one that may still hold
// leaves it waiting with the reason.
TEST_F(PassTest, ADependencyThatCannotHoldCancelsTheJob) {
  AddWorker("w0");
  JobEntry* first = Queue(OneRank("first"));
  JobSpec then = OneRank("then");
  then.depends_on = {{first->job.id(), "succeeded"}};
  JobEntry* after = Queue(then);
  Pass();
  EXPECT_EQ(State(after), moe::v1::PENDING);
  EXPECT_EQ(after->wait_class, WaitClass::kDependency) << after->waiting_reason;
  ASSERT_TRUE(jobs_.Transition(*first, moe::v1::CANCELLED, "Cancelled", "test").ok());
  Pass();
  EXPECT_EQ(State(after), moe::v1::CANCELLED) << after->job.message();
}

// The lifecycle: every rank's success ends the job SUCCEEDED; a transient failure restarts it after
// its back-off (RESTARTING, not placed before), a preemption requeues it without using a restart.
TEST_F(PassTest, TheLifecycleOfAnAttempt) {
  AddWorker("w0");
  JobEntry* j = Queue(OneRank("j"));
  Pass();
  ASSERT_EQ(State(j), moe::v1::SCHEDULED);
  moe::v1::RankFinished f;
  f.set_job_id(j->job.id());
  f.set_attempt(j->job.attempt());
  f.set_rank(0);
  f.set_ok(false);
  f.set_failure_class(moe::v1::FAILURE_TRANSIENT);
  f.set_message("boom");
  attempts_.RankFinished("w0", f);
  EXPECT_EQ(State(j), moe::v1::RESTARTING);
  EXPECT_EQ(j->job.restarts(), 1);
  Pass();
  EXPECT_EQ(State(j), moe::v1::RESTARTING) << "placed inside its back-off";
  EXPECT_EQ(j->wait_class, WaitClass::kBackoff);
  clock_.Advance(11);
  j->not_before = 0;  // the tick's job when the back-off ends
  Pass();
  ASSERT_EQ(State(j), moe::v1::SCHEDULED);
  EXPECT_EQ(j->job.attempt(), 2);
  attempts_.Stop(*j, "preempted by a test", StopCause::kPreempted);
  EXPECT_EQ(State(j), moe::v1::PREEMPTED);
  f.set_attempt(2);
  f.set_failure_class(moe::v1::FAILURE_STOPPED);
  f.set_checkpoint_step(7);
  attempts_.RankFinished("w0", f);
  EXPECT_EQ(j->job.restarts(), 1) << "a preemption uses no restart";
  EXPECT_EQ(j->job.checkpoint_step(), 7) << "its stop checkpoint";
  Pass();
  ASSERT_EQ(State(j), moe::v1::SCHEDULED);
  moe::v1::StepReport step;
  step.set_job_id(j->job.id());
  step.set_attempt(3);
  step.set_rank(0);
  step.mutable_metrics()->set_step(j->spec.training.steps);
  step.mutable_metrics()->set_total_steps(j->spec.training.steps);
  attempts_.Step(step);
  f.set_attempt(3);
  f.set_ok(true);
  f.set_failure_class(moe::v1::FAILURE_NONE);
  f.set_checkpoint_step(j->spec.training.steps);
  attempts_.RankFinished("w0", f);
  EXPECT_EQ(State(j), moe::v1::SUCCEEDED) << j->job.message();
}

}  // namespace
}  // namespace moe::controller
