// The controller's logic with a fake clock and fake worker streams: the job state machine,
// placement, failures and restarts, cancellation, priorities, recovery after a controller restart,
// and what happens while the store refuses writes.
#include "controller/controller.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "common/host_id.h"
#include "common/job_spec_proto.h"
#include "tests/controller/flaky_store.h"

namespace moe::controller {
namespace {

class FakeChannel : public WorkerChannel {
 public:
  void Send(const moe::v1::ControllerMessage& m) override { sent.push_back(m); }
  std::vector<moe::v1::Assignment> Assignments() const {
    std::vector<moe::v1::Assignment> out;
    for (const auto& m : sent)
      if (m.has_assign()) out.push_back(m.assign());
    return out;
  }
  int Cancels() const {
    int n = 0;
    for (const auto& m : sent) n += m.has_cancel() ? 1 : 0;
    return n;
  }
  std::vector<moe::v1::ControllerMessage> sent;
};

// A worker's stream in the tests. One replaced by a newer stream is kept, not destroyed: gRPC keeps
// a stream until it finished, and the controller closes the one a new registration replaced.
class ChannelSlot {
 public:
  ChannelSlot& operator=(std::unique_ptr<FakeChannel> p) {
    static std::vector<std::unique_ptr<FakeChannel>> replaced;
    if (ptr_) replaced.push_back(std::move(ptr_));
    ptr_ = std::move(p);
    return *this;
  }
  FakeChannel* get() const { return ptr_.get(); }
  FakeChannel* operator->() const { return ptr_.get(); }
  FakeChannel& operator*() const { return *ptr_; }

 private:
  std::unique_ptr<FakeChannel> ptr_;
};

JobSpec Spec(const std::string& name, int world, int ep, int priority = 0, int max_restarts = 3) {
  JobSpec s;
  s.name = name;
  s.priority = priority;
  s.model = *ModelPreset("tiny");
  s.parallelism.world_size = world;
  s.parallelism.expert_parallel = ep;
  s.data.path = "data/fortunes";
  s.data.micro_batch_size = 1;
  s.data.global_batch_size = world;
  s.checkpoint.dir = "/tmp/ckpt-" + name;
  s.max_restarts = max_restarts;
  return s;
}

class ControllerTest : public ::testing::Test {
 protected:
  // Restarts at once here; the backoff has its own test (ARestartWaitsItsBackoff...).
  ControllerTest() {
    config_.restart_backoff_seconds = 0;
    Make();
  }
  void Make() {
    registry_ = std::make_shared<prometheus::Registry>();
    metrics_ = std::make_unique<MetricsAggregator>(registry_, clock_, StragglerOptions{0.3, 3}, 60,
                                                   "test");
    controller_ = std::make_unique<Controller>(store_, clock_, *metrics_, config_);
    ASSERT_TRUE(controller_->Recover().ok());
  }
  FakeChannel* AddWorker(const std::string& name, const std::string& rack, const std::string& node,
                         std::vector<moe::v1::RunningRank> running = {},
                         int64_t memory = int64_t{64} << 30) {
    auto& ch = channels_[name];
    ch = std::make_unique<FakeChannel>();
    moe::v1::Register r;
    r.set_name(name);
    r.set_rack(rack);
    r.set_node(node);
    r.set_device("cpu");
    r.set_memory_bytes(memory);  // a CPU worker reports its host's memory
    for (auto& x : running) *r.add_running() = x;
    auto reg = controller_->Register(r, ch.get());
    EXPECT_TRUE(reg.ok()) << reg.status();
    if (reg.ok()) {
      sessions_[name] = reg->session();
      moe::v1::WorkerMessage hb;  // its first beat on the answer, as an agent's: the plain lease
      hb.mutable_heartbeat();
      Msg(name, hb);
    }
    return ch.get();
  }
  // A submit, then the pass that places it when others were waiting (a submit into an empty queue
  // is placed at once; under a queue the next tick's pass does it, within 100 ms in
  // moe-controller). The returned record is the one the submit answered.
  moe::v1::Job Submit(const JobSpec& s) {
    auto j = controller_->Submit(SpecToProto(s));
    EXPECT_TRUE(j.ok()) << j.status();
    controller_->SchedulePass();
    return j.ok() ? *j : moe::v1::Job();
  }
  moe::v1::JobState State(const std::string& id) { return controller_->Get(id, false)->state(); }
  void Msg(const std::string& worker, const moe::v1::WorkerMessage& m) {
    const Status st = controller_->OnWorkerMessage(worker, m);
    EXPECT_TRUE(st.ok()) << st;
  }
  void Step(const std::string& worker, const moe::v1::Assignment& a, int64_t step,
            double compute = 0.1, int64_t checkpoint_step = 0) {
    moe::v1::WorkerMessage m;
    auto* s = m.mutable_step();
    s->set_job_id(a.job_id());
    s->set_attempt(a.attempt());
    s->set_rank(a.rank());
    s->mutable_metrics()->set_step(step);
    s->mutable_metrics()->set_total_steps(a.spec().spec().training().steps());
    s->mutable_metrics()->set_loss(5.0);
    s->mutable_metrics()->set_step_seconds(0.2);
    s->mutable_metrics()->set_compute_seconds(compute);
    s->mutable_metrics()->set_checkpoint_step(checkpoint_step);
    s->mutable_metrics()->set_tflops_per_device(
        static_cast<double>(step));  // distinct per step: the mean is checkable
    last_step_[a.job_id() + "/" + std::to_string(a.attempt())] = step;
    Msg(worker, m);
  }
  // A rank's end. A success comes as a real rank's does: after the job's last step, with its final
  // checkpoint (the controller believes no other).
  void Finish(const std::string& worker, const moe::v1::Assignment& a, bool ok,
              const std::string& why = "") {
    const int64_t total = a.spec().spec().training().steps();
    if (ok && last_step_[a.job_id() + "/" + std::to_string(a.attempt())] < total)
      Step(worker, a, total);
    moe::v1::WorkerMessage m;
    auto* f = m.mutable_finished();
    f->set_job_id(a.job_id());
    f->set_attempt(a.attempt());
    f->set_rank(a.rank());
    f->set_ok(ok);
    if (ok) f->set_checkpoint_step(total);
    f->set_message(why);
    Msg(worker, m);
  }
  // `name` goes silent past its lease while the others keep heart-beating: the controller loses it.
  void LoseWorker(const std::string& name) {
    for (int i = 0; i < 7; ++i) {
      clock_.Advance(1);
      moe::v1::WorkerMessage hb;
      hb.mutable_heartbeat();
      for (const auto& [n, ch] : channels_)
        if (n != name) Msg(n, hb);
      controller_->Tick();
    }
  }
  // Every worker still live beats (a lost one is told to register again: its own test).
  void Heartbeats() {
    std::set<std::string> lost;
    for (const auto& w : controller_->Workers())
      if (w.state() == moe::v1::LOST) lost.insert(w.agent().empty() ? w.name() : w.agent());
    for (auto& [name, ch] : channels_) {
      if (lost.count(name) != 0) continue;
      moe::v1::WorkerMessage hb;
      hb.mutable_heartbeat()->set_time(clock_.Now());
      Msg(name, hb);
    }
  }
  std::vector<std::string> EventTypes(const std::string& id) {
    std::vector<std::string> out;
    const moe::v1::Job job = *controller_->Get(id, true);
    for (const auto& e : job.events()) out.push_back(e.type());
    return out;
  }

  int EventCount(const std::string& id, const std::string& type) {
    int n = 0;
    for (const auto& t : EventTypes(id)) n += t == type ? 1 : 0;
    return n;
  }

  // The gauge `name`{rack} as /metrics shows it; nothing when there is no such series.
  std::optional<double> RackGauge(const std::string& name, const std::string& rack) {
    for (const auto& family : registry_->Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        if (m.label.size() == 1 && m.label[0].value == rack) return m.gauge.value;
      }
    }
    return std::nullopt;
  }

  // The gauge or counter `name`{labels} as /metrics shows it (labels exactly); nothing when there
  // is none.
  std::optional<double> Gauge(const std::string& name,
                              const std::map<std::string, std::string>& labels) {
    for (const auto& family : registry_->Collect()) {
      if (family.name != name) continue;
      for (const auto& m : family.metric) {
        std::map<std::string, std::string> got;
        for (const auto& l : m.label) got[l.name] = l.value;
        if (got != labels) continue;
        return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
    return std::nullopt;
  }

  FakeClock clock_;
  FlakyStateStore store_;
  ControllerConfig config_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsAggregator> metrics_;
  std::unique_ptr<Controller> controller_;
  std::map<std::string, ChannelSlot> channels_;
  std::map<std::string, int64_t> last_step_;  // job/attempt -> the last step Step() reported
  std::map<std::string, std::string> sessions_;
};

TEST_F(ControllerTest, SubmitScheduleRunSucceed) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto job = Submit(Spec("j", 2, 2));
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  ASSERT_EQ(a->Assignments().size(), 1u);
  ASSERT_EQ(b->Assignments().size(), 1u);
  const auto ra = a->Assignments()[0], rb = b->Assignments()[0];
  EXPECT_EQ(ra.rank() + rb.rank(), 1);
  EXPECT_EQ(ra.spec().spec().parallelism().world_size(), 2);
  EXPECT_EQ(ra.rendezvous_prefix(), rb.rendezvous_prefix());
  EXPECT_TRUE(ra.resume());
  Step("a", ra, 1);
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
  Step("b", rb, 1);
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().rank_compute_seconds_size(), 2)
      << "all ranks' step 1 merged";
  Finish("a", ra, true);
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING) << "one rank done is not the job done";
  Finish("b", rb, true);
  EXPECT_EQ(State(job.id()), moe::v1::SUCCEEDED);
  EXPECT_EQ(EventTypes(job.id()),
            (std::vector<std::string>{"Submitted", "Scheduled", "Running", "Succeeded"}));
  for (const auto& w : controller_->Workers()) EXPECT_EQ(w.state(), moe::v1::IDLE) << w.name();
}

// The spec reaches a rank as the typed message the controller validated and stored: every field the
// user wrote (a map of labels, schedules, optional fields) unchanged, and nothing but the attempt's
// world size rewritten. No text in between (no spec_json).
TEST_F(ControllerTest, TheRankReceivesTheTypedSpecUnchanged) {
  auto* a = AddWorker("a", "r0", "n0");
  auto* b = AddWorker("b", "r0", "n1");
  auto doc = TrainingJobFromText(R"(apiVersion: moe/v1
kind: TrainingJob
metadata:
  name: typed
  priority: 7
  labels: {team: research, "example.com/tier": gold, empty: ""}
spec:
  model: {preset: tiny, moe: {bias_update_schedule: [{until_tokens: 1.0e6, shape: constant, value: 0.001}, {shape: constant, value: 0}]}}
  parallelism: {world_size: 2, expert_parallel: 2, grad_bucket_mb: 0}
  data: {path: /data/fortunes, seq_length: 64, micro_batch_size: 1, global_batch_size: 2, split: "90,10,0"}
  optimizer: {lr: 0.001, distributed: false}
  training: {steps: 11, seed: 99, recompute: [mlp], deterministic: true}
  checkpoint: {dir: /tmp/typed-ckpt, interval_steps: 5, keep_last: 2}
  max_restarts: 1
)");
  ASSERT_TRUE(doc.ok()) << doc.status();
  auto job = controller_->Submit(*doc);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(a->Assignments().size(), 1u);
  ASSERT_EQ(b->Assignments().size(), 1u);
  const moe::v1::TrainingJob got = a->Assignments()[0].spec();
  // Everything the user wrote arrives as written.
  google::protobuf::util::MessageDifferencer as_written;
  as_written.set_scope(google::protobuf::util::MessageDifferencer::PARTIAL);
  std::string diff;
  as_written.ReportDifferencesToString(&diff);
  EXPECT_TRUE(as_written.Compare(*doc, got)) << diff;
  EXPECT_EQ(got.metadata().labels().size(), 3);
  EXPECT_EQ(got.metadata().labels().at("example.com/tier"), "gold");
  EXPECT_TRUE(got.metadata().labels().contains("empty"));
  // And it is the record the controller stored (expanded: every default written out), as it is.
  google::protobuf::util::MessageDifferencer exact;
  EXPECT_TRUE(exact.Equals(got, job->spec())) << got.DebugString() << "\nvs stored\n"
                                              << job->spec().DebugString();
  EXPECT_TRUE(exact.Equals(got, b->Assignments()[0].spec())) << "every rank gets the same spec";
  EXPECT_TRUE(got.spec().model().has_hidden_size()) << "the preset is expanded for the rank";
}

TEST_F(ControllerTest, AWorkerReportsOnlyForTheRankItRuns) {
  AddWorker("w0", "r0", "n0");
  AddWorker("w1", "r0", "n1");
  AddWorker("intruder", "r0", "n2");
  const auto job = Submit(Spec("j", 2, 2));
  const moe::v1::Assignment a0 = channels_["w0"]->Assignments().at(0);
  Step("w0", a0, 1);
  Step("w1", channels_["w1"]->Assignments().at(0), 1);
  ASSERT_EQ(State(job.id()), moe::v1::RUNNING);
  ASSERT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1);
  moe::v1::WorkerMessage fin;
  fin.mutable_finished()->set_job_id(a0.job_id());
  fin.mutable_finished()->set_attempt(a0.attempt());
  fin.mutable_finished()->set_rank(a0.rank());
  fin.mutable_finished()->set_ok(true);
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", fin).code(), StatusCode::kPermissionDenied);
  fin.mutable_finished()->set_ok(false);
  fin.mutable_finished()->set_exit_code(2);
  fin.mutable_finished()->set_failure_class(moe::v1::FAILURE_PERMANENT);
  EXPECT_EQ(controller_->OnWorkerMessage("w1", fin).code(), StatusCode::kPermissionDenied)
      << "another rank's worker of the same job is foreign too";
  fin.mutable_finished()->set_rank(7);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", fin).code(), StatusCode::kPermissionDenied)
      << "no rank 7";
  moe::v1::WorkerMessage step;
  step.mutable_step()->set_job_id(a0.job_id());
  step.mutable_step()->set_attempt(a0.attempt());
  step.mutable_step()->set_rank(a0.rank());
  step.mutable_step()->mutable_metrics()->set_step(-7);
  EXPECT_EQ(controller_->OnWorkerMessage("intruder", step).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", step).code(), StatusCode::kInvalidArgument)
      << "a negative step";
  step.mutable_step()->mutable_metrics()->set_step(2);
  step.mutable_step()->mutable_metrics()->set_mfu(42);
  step.mutable_step()->mutable_metrics()->set_step_seconds(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(controller_->OnWorkerMessage("w0", step).ok())
      << "implausible figures are dropped, the stream goes on";
  Step("w1", channels_["w1"]->Assignments().at(0), 2);
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1)
      << "the dropped report counted for nothing";
  step.mutable_step()->mutable_metrics()->set_mfu(0.5);
  step.mutable_step()->mutable_metrics()->set_step_seconds(0.2);
  for (int i = 0; i < 1000; ++i)
    step.mutable_step()->mutable_metrics()->add_expert_load_imbalance_per_layer(1);
  EXPECT_EQ(controller_->OnWorkerMessage("w0", step).code(), StatusCode::kInvalidArgument)
      << "more layers than the model";
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING)
      << "nothing a foreign or bad report said changed the job";
  EXPECT_EQ(controller_->Get(job.id(), false)->last_metrics().step(), 1);
  moe::v1::Register fake;
  fake.set_name("intruder2");
  fake.set_rack("r0");
  fake.set_node("n3");
  fake.set_device("cpu");
  *fake.add_finished() = fin.finished();
  fake.mutable_finished(0)->set_rank(0);
  FakeChannel ch;
  EXPECT_EQ(controller_->Register(fake, &ch).status().code(), StatusCode::kPermissionDenied)
      << "nor in a registration's outcomes";
  EXPECT_EQ(State(job.id()), moe::v1::RUNNING);
}

TEST_F(ControllerTest, RendezvousKeysAreTheCallersOwnAttempts) {
  AddWorker("w0", "r0", "n0");
  AddWorker("idle", "r0", "n1");
  const auto job = Submit(Spec("j", 1, 1));
  const moe::v1::Assignment a0 = channels_["w0"]->Assignments().at(0);
  auto scope = controller_->RendezvousScope(sessions_["w0"]);
  ASSERT_TRUE(scope.ok()) << scope.status();
  EXPECT_EQ(*scope, std::vector<std::string>{"job/" + job.id() + "/attempt/" +
                                             std::to_string(a0.attempt()) + "/"});
  EXPECT_EQ(controller_->RendezvousScope(sessions_["idle"]).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(controller_->RendezvousScope("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(controller_->RendezvousScope("guess").status().code(), StatusCode::kUnauthenticated);
}

TEST_F(ControllerTest, SubmitIsIdempotentByRequestIdAndCheckpointDirectoriesAreNotShared) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  auto a = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-1");
  ASSERT_TRUE(a.ok()) << a.status();
  auto again = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), a->id()) << "a retry returns the job the first submit created";
  EXPECT_EQ(controller_->List({}).size(), 1u);
  JobSpec same_dir = Spec("b", 1, 1);
  same_dir.checkpoint.dir = "/tmp//ckpt-a/./";  // the same directory, written otherwise
  auto shared = controller_->Submit(SpecToProto(same_dir), "req-2");
  EXPECT_EQ(shared.status().code(), StatusCode::kFailedPrecondition) << shared.status();
  ASSERT_TRUE(controller_->Cancel(a->id()).ok());
  auto after = controller_->Submit(SpecToProto(same_dir), "req-3");
  EXPECT_EQ(after.status().code(), StatusCode::kFailedPrecondition)
      << "a directory serves one job for its whole life";
  EXPECT_NE(after.status().message().find("finished job " + a->id()), std::string::npos)
      << after.status();
  JobSpec dotdot = Spec("b2", 1, 1);
  dotdot.checkpoint.dir = "/tmp/x/../ckpt-a";  // ".." resolved: a's directory again
  EXPECT_EQ(controller_->Submit(SpecToProto(dotdot)).status().code(),
            StatusCode::kFailedPrecondition);
  auto resubmitted = controller_->Submit(SpecToProto(Spec("a", 1, 1)), "req-4");
  EXPECT_TRUE(resubmitted.ok()) << "the same name and owner take a finished job's directory: "
                                << resubmitted.status();
  JobSpec huge = Spec("c", 1, 1);
  huge.data.path = std::string(1 << 20, 'x');
  EXPECT_EQ(controller_->Submit(SpecToProto(huge)).status().code(), StatusCode::kInvalidArgument);
}

// Checkpoint directories do not nest: one job's commits prune the step directories beneath its own
// (the outer job's final commit deleted an inner job's checkpoints), live or finished.
TEST_F(ControllerTest, CheckpointDirectoriesDoNotNest) {
  AddWorker("w0", "r0", "n0");
  JobSpec outer = Spec("outer", 1, 1);
  outer.checkpoint.dir = "/tmp/nest/outer";
  auto o = controller_->Submit(SpecToProto(outer));
  ASSERT_TRUE(o.ok()) << o.status();
  JobSpec inner = Spec("inner", 1, 1);
  inner.checkpoint.dir = "/tmp/nest/outer/inner";
  auto in = controller_->Submit(SpecToProto(inner));
  ASSERT_EQ(in.status().code(), StatusCode::kFailedPrecondition) << in.status();
  EXPECT_NE(in.status().message().find("lies inside /tmp/nest/outer"), std::string::npos)
      << in.status();
  JobSpec around = Spec("around", 1, 1);
  around.checkpoint.dir = "/tmp/nest/";
  auto ar = controller_->Submit(SpecToProto(around));
  ASSERT_EQ(ar.status().code(), StatusCode::kFailedPrecondition) << ar.status();
  EXPECT_NE(ar.status().message().find("holds /tmp/nest/outer"), std::string::npos) << ar.status();
  ASSERT_TRUE(controller_->Cancel(o->id()).ok());
  EXPECT_EQ(controller_->Submit(SpecToProto(inner)).status().code(),
            StatusCode::kFailedPrecondition)
      << "a finished job's checkpoints are still there to be pruned";
  JobSpec sibling = Spec("sibling", 1, 1);
  sibling.checkpoint.dir = "/tmp/nest/outer-2";  // a prefix of the name, not of the path
  EXPECT_TRUE(controller_->Submit(SpecToProto(sibling)).ok());
  // A relative directory lies under each worker's first root, which the controller does not know:
  // it is not compared as if it were below / ("tmp" does not hold /tmp/nest/outer).
  JobSpec relative = Spec("relative", 1, 1);
  relative.checkpoint.dir = "tmp";
  EXPECT_TRUE(controller_->Submit(SpecToProto(relative)).ok());
}

// Defaults that work together: a worker on default checkpoint roots is offered the controller's
// root, which counts for it on the controller's own host at once and elsewhere once the worker
// reports it mounted; until then a job that names no directory is refused, naming the way out.
TEST_F(ControllerTest, ACheckpointRootCountsWhereItIsMounted) {
  config_.checkpoint_root = "/srv/moe/checkpoints";
  Make();
  const auto reg = [&](const std::string& name, const std::string& host) {
    channels_[name] = std::make_unique<FakeChannel>();
    moe::v1::Register r;
    r.set_name(name);
    r.set_rack("r0");
    r.set_node(name);
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_host_id(host);
    r.add_checkpoint_roots("/tmp/moe-worker-" + name + "/checkpoints");
    r.set_uses_default_checkpoint_roots(true);
    auto out = controller_->Register(r, channels_[name].get());
    EXPECT_TRUE(out.ok()) << out.status();
    if (out.ok()) sessions_[name] = out->session();
    return out.ok() ? out->checkpoint_root() : std::string("refused");
  };
  EXPECT_EQ(reg("far", "another-machine/far"), "/srv/moe/checkpoints") << "offered";
  JobSpec spec = Spec("nodir", 1, 1);
  spec.checkpoint.dir.clear();
  auto refused = controller_->Submit(SpecToProto(spec));
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("names no spec.checkpoint.dir"), std::string::npos)
      << refused.status();
  moe::v1::WorkerMessage bad;  // only the root it was offered
  bad.mutable_checkpoint_root_mounted()->set_root("/");
  bad.mutable_checkpoint_root_mounted()->set_ok(true);
  EXPECT_EQ(controller_->OnWorkerMessage("far", bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(controller_->Submit(SpecToProto(spec)).status().code(),
            StatusCode::kFailedPrecondition);
  moe::v1::WorkerMessage mounted;
  mounted.mutable_checkpoint_root_mounted()->set_root("/srv/moe/checkpoints");
  mounted.mutable_checkpoint_root_mounted()->set_ok(true);
  ASSERT_TRUE(controller_->OnWorkerMessage("far", mounted).ok());
  auto job = controller_->Submit(SpecToProto(spec));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().spec().checkpoint().dir(), "/srv/moe/checkpoints/" + job->id());
  // On the controller's own host the root is there (the controller made it): it counts at once. (A
  // restarted controller: "far" is lost until it registers again.)
  Make();
  EXPECT_EQ(reg("near", ThisHostId()), "/srv/moe/checkpoints");
  JobSpec second = Spec("nodir2", 1, 1);
  second.checkpoint.dir.clear();
  EXPECT_TRUE(controller_->Submit(SpecToProto(second)).ok());
  // ... unless the agent answers that it cannot use it (another user, say): taken back.
  moe::v1::WorkerMessage cannot;
  cannot.mutable_checkpoint_root_mounted()->set_root("/srv/moe/checkpoints");
  cannot.mutable_checkpoint_root_mounted()->set_ok(false);
  cannot.mutable_checkpoint_root_mounted()->set_why("not writable by this worker");
  ASSERT_TRUE(controller_->OnWorkerMessage("near", cannot).ok());
  JobSpec third = Spec("nodir3", 1, 1);
  third.checkpoint.dir.clear();
  EXPECT_EQ(controller_->Submit(SpecToProto(third)).status().code(),
            StatusCode::kFailedPrecondition);
  // An agent with roots of its own was offered nothing: its answer is refused.
  AddWorker("own", "r0", "own");
  EXPECT_EQ(controller_->OnWorkerMessage("own", mounted).code(), StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, ListJobsPagesWithFiltersAndDeleteRemovesFinishedJobs) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Spec(i == 3 ? "other" : "job" + std::to_string(i), 1, 1);
    spec.labels["team"] = i % 2 == 0 ? "research" : "prod";
    if (i == 4) spec.labels["spot"] = "";
    ids.push_back(Submit(spec).id());
    clock_.Advance(0.001);
  }
  moe::v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> seen;
  do {
    auto page = controller_->ListPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs_size(), 2);
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, ids) << "every job once, oldest first";
  req.Clear();
  req.set_name_prefix("other");
  EXPECT_EQ(controller_->ListPage(req)->jobs_size(), 1);
  // Label selectors are the controller's (kubectl's syntax), and work across pages.
  req.Clear();
  req.set_label_selector("team=research,!spot");
  req.set_page_size(1);
  seen.clear();
  do {
    auto page = controller_->ListPage(req);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const auto& j : page->jobs()) seen.push_back(j.id());
    req.set_page_token(page->next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(seen, (std::vector<std::string>{ids[0], ids[2]}));
  req.Clear();
  req.set_label_selector("team in (a)");
  const auto bad = controller_->ListPage(req);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("label_selector"), std::string::npos) << bad.status();
  req.Clear();
  req.set_page_size(5000);
  EXPECT_EQ(controller_->ListPage(req).status().code(), StatusCode::kInvalidArgument);
  req.Clear();
  req.set_page_token("garbage");
  EXPECT_EQ(controller_->ListPage(req).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(controller_->Delete(ids[0]).code(), StatusCode::kFailedPrecondition) << "a live job";
  ASSERT_TRUE(controller_->Cancel(ids[0]).ok());
  store_.fail_writes = true;
  EXPECT_EQ(controller_->Delete(ids[0]).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(controller_->Get(ids[0], false).ok()) << "a delete the store refused keeps the job";
  store_.fail_writes = false;
  ASSERT_TRUE(controller_->Delete(ids[0]).ok());
  EXPECT_EQ(controller_->Get(ids[0], false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_.LoadEvents(ids[0])->empty()) << "its events went with it";
}

TEST_F(ControllerTest, FinishedJobsGoAfterTheRetention) {
  AddWorker("w0", "r0", "n0");
  ASSERT_TRUE(controller_->SetDrained("w0", true).ok());
  const auto old_job = Submit(Spec("old", 1, 1));
  const auto live = Submit(Spec("live", 1, 1));
  ASSERT_TRUE(controller_->Cancel(old_job.id()).ok());
  clock_.Advance(config_.finished_job_retention_seconds - 1);
  controller_->Tick();
  EXPECT_TRUE(controller_->Get(old_job.id(), false).ok()) << "within the retention";
  clock_.Advance(2);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(controller_->Get(old_job.id(), false).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(controller_->Get(live.id(), false).ok()) << "live jobs stay whatever their age";
}

TEST_F(ControllerTest, AnAssignedRankThatNeverStartsFailsItsAttemptAtTheDeadline) {
  auto* ch = AddWorker("w0", "r0", "n0");
  const auto job = Submit(Spec("j", 1, 1));
  ASSERT_EQ(ch->Assignments().size(), 1u);
  clock_.Advance(config_.rank_start_seconds - 1);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::SCHEDULED);
  clock_.Advance(2);
  Heartbeats();
  controller_->Tick();
  EXPECT_EQ(EventCount(job.id(), "AttemptFailed"), 1);
  const auto j = *controller_->Get(job.id(), true);
  EXPECT_EQ(j.restarts(), 1);
  std::string why;
  for (const auto& e : j.events())
    if (e.type() == "AttemptFailed") why = e.message();
  EXPECT_NE(why.find("rank 0 on worker w0 did not start within"), std::string::npos) << why;
}

TEST_F(ControllerTest, CpuWorkersOnOneHostShareItsCores) {
  for (const char* n : {"a", "b"}) {
    auto& ch = channels_[n];
    ch = std::make_unique<FakeChannel>();
    moe::v1::Register r;
    r.set_name(n);
    r.set_rack("r0");
    r.set_node(std::string("node-") + n);  // distinct node names, one machine
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    r.set_cpu_cores(8);
    r.set_host_id("machine-1/host");
    r.set_memory_bytes(int64_t{64} << 30);
    ASSERT_TRUE(controller_->Register(r, ch.get()).ok());
  }
  Submit(Spec("j", 2, 2));
  ASSERT_EQ(channels_["a"]->Assignments().size(), 1u);
  EXPECT_EQ(channels_["a"]->Assignments()[0].cpu_threads(), 4)
      << "8 cores over the 2 CPU workers of the host";
}

TEST_F(ControllerTest, EventsNameWhoSubmittedAndCancelled) {
  AddWorker("a", "r0", "n0");
  auto j = controller_->Submit(SpecToProto(Spec("who", 1, 1)), "", "alice");
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(controller_->Cancel(j->id(), "bob").ok());
  auto got = controller_->Get(j->id(), /*with_events=*/true);
  ASSERT_TRUE(got.ok());
  std::string all;
  for (const auto& ev : got->events()) all += ev.type() + ": " + ev.message() + "\n";
  EXPECT_NE(all.find("Submitted: priority 0, 1 ranks (EP 1, groups within one rack); by alice"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("Stopping: cancelled by bob"), std::string::npos) << all;
  auto anon = controller_->Submit(SpecToProto(Spec("anon", 1, 1)));  // no authentication: no name
  ASSERT_TRUE(anon.ok());
  ASSERT_TRUE(controller_->Cancel(anon->id()).ok());
  bool by_a_user = false;
  auto anon_job =
      controller_->Get(anon->id(), true);  // held: a range-for over a temporary's member dangles
  ASSERT_TRUE(anon_job.ok());
  for (const auto& ev : anon_job->events()) by_a_user |= ev.message() == "cancelled by a user";
  EXPECT_TRUE(by_a_user);
}

TEST_F(ControllerTest, Fp8JobsAreAcceptedAndFp32OnCudaIsRefusedNamingTheField) {
  AddWorker("a", "r0", "n0");
  JobSpec spec = Spec("fp8", 1, 1);
  spec.resources.precision = "fp8";  // emulated on cpu
  auto j = controller_->Submit(SpecToProto(spec));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->spec().spec().resources().precision(), "fp8");
  JobSpec wide = Spec("wide", 1, 1);
  wide.resources.device = "cuda";
  wide.resources.precision = "fp32";
  auto k = controller_->Submit(SpecToProto(wide));
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status().message().find("spec.resources.precision: fp32 on cuda"), std::string::npos)
      << k.status();
  EXPECT_EQ(controller_->List({}).size(), 1u) << "only the fp8 job is stored";
}

TEST_F(ControllerTest, AJobNeedingMoreMemoryThanAnyWorkerHasIsRefusedWithBothNumbers) {
  AddWorker("a", "r0", "n0", {}, /*memory=*/0);  // reports no memory: nothing to check against
  JobSpec huge = Spec("huge", 1, 1);
  huge.model.hidden_size = 16384;  // tiny's layers at h = 16384: tens of GB per rank
  huge.model.num_heads = 128;
  ASSERT_TRUE(ValidateJobSpec(huge).ok());
  EXPECT_TRUE(controller_->Submit(SpecToProto(huge)).ok()) << "no worker reports memory: accepted";
  auto& ch = channels_["m"];
  ch = std::make_unique<FakeChannel>();
  moe::v1::Register r;
  r.set_name("m"), r.set_rack("r0"), r.set_node("n1"), r.set_device("cpu");
  r.set_memory_bytes(int64_t{8} << 30);  // 8.6 GB, shared by no other CPU worker on its host id
  r.set_host_id("host-m");
  ASSERT_TRUE(controller_->Register(r, ch.get()).ok());
  const size_t stored = controller_->List({}).size();
  huge.name = "huge2";
  huge.checkpoint.dir = "/tmp/ckpt-huge2";
  auto j = controller_->Submit(SpecToProto(huge));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = j.status().message();
  std::printf("refused: %s\n", msg.c_str());
  EXPECT_NE(msg.find("GB per rank"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8.59 GB of the roomiest cpu worker (m)"), std::string::npos) << msg;
  EXPECT_EQ(controller_->List({}).size(), stored) << "nothing stored";
  EXPECT_TRUE(controller_->Submit(SpecToProto(Spec("fits", 1, 1))).ok()) << "a tiny job still fits";
}

// Memory is checked at placement too: a job submitted before any worker registered waits, with the
// reason, on workers too small for it (and on ones that report no memory), instead of running
// there.
TEST_F(ControllerTest, ATooBigJobSubmittedBeforeAnyWorkerWaitsAndSaysWhy) {
  JobSpec huge = Spec("huge", 1, 1);
  huge.model.hidden_size = 16384;
  huge.model.num_heads = 128;
  auto job = Submit(huge);  // no worker: nothing to check against at submit
  AddWorker("small", "r0", "n0", {}, int64_t{2} << 30);
  AddWorker("silent", "r0", "n1", {}, /*memory=*/0);
  controller_->Tick();
  EXPECT_EQ(State(job.id()), moe::v1::PENDING);
  EXPECT_TRUE(channels_["small"]->Assignments().empty() &&
              channels_["silent"]->Assignments().empty());
  const std::string why = controller_->Get(job.id(), false)->waiting_reason();
  EXPECT_NE(why.find("2 more lack the"), std::string::npos) << why;
  EXPECT_NE(why.find("the roomiest has 2.15 GB"), std::string::npos) << why;
  EXPECT_NE(why.find("1 report no memory"), std::string::npos) << why;
  auto fits = Submit(Spec("fits", 1, 1));
  EXPECT_EQ(State(fits.id()), moe::v1::SCHEDULED)
      << "a job that fits goes on the worker with memory";
  EXPECT_EQ(channels_["small"]->Assignments().size(), 1u);
}

TEST_F(ControllerTest, AJobLargerThanTheClusterWaitsForCapacityAndOneOverTheCeilingIsRefused) {
  auto early =
      Submit(Spec("early", 2, 2));  // before any worker registered: the order of a Slurm script
  EXPECT_EQ(State(early.id()), moe::v1::PENDING);
  EXPECT_NE(controller_->Get(early.id(), false)
                ->waiting_reason()
                .find("waiting for capacity: the job needs 2 cpu workers and "
                      "the cluster has 0 (2 more)"),
            std::string::npos)
      << controller_->Get(early.id(), false)->waiting_reason();
  AddWorker("a", "r0", "n0");
  AddWorker("b", "r1", "n1");
  // EP 2 within a rack, but each rack has one worker: it waits, saying why.
  EXPECT_EQ(State(early.id()), moe::v1::PENDING);
  EXPECT_NE(controller_->Get(early.id(), false)->waiting_reason().find("inside one rack"),
            std::string::npos)
      << controller_->Get(early.id(), false)->waiting_reason();
  AddWorker("c", "r0", "n2");
  EXPECT_EQ(State(early.id()), moe::v1::SCHEDULED) << "placed once a second worker in r0 arrived";
  config_.max_job_ranks = 2;
  Make();
  auto j = controller_->Submit(SpecToProto(Spec("too-big", 4, 1)));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      j.status().message().find(
          "can never fit: spec.parallelism.world_size 4 exceeds this controller's ceiling of 2"),
      std::string::npos)
      << j.status();
  EXPECT_EQ(controller_->List({}).size(), 1u) << "the refused job is not stored";
  // Semantic errors carry field paths.
  auto bad = SpecToProto(Spec("bad", 2, 2));
  bad.mutable_spec()->mutable_model()->mutable_moe()->set_top_k(0);
  j = controller_->Submit(bad);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("spec.model.moe.top_k"), std::string::npos) << j.status();
}

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

// One agent per node (issue 39): its devices are placed and listed as workers of their own, while
// its one stream carries their assignments and reports and its one lease keeps them all.
TEST_F(ControllerTest, ANodeAgentsDevicesAreWorkersOnOneStreamAndOneLease) {
  auto& ch = channels_["node0"];
  ch = std::make_unique<FakeChannel>();
  moe::v1::Register r;
  r.set_name("node0");
  r.set_rack("r0");
  r.set_node("n0");
  r.set_device("cpu");
  for (int i = 0; i < 4; ++i) r.add_devices("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  r.set_cpu_cores(8);
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
  }  // the controller dies
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

// A restarted controller admitting a herd: the agents it told to come back later are not missing.
// The reconnect grace does not run out while the registration gate has a backlog, and runs in full
// once it has none (16,384 agents back after a restart take longer than the 10 s grace).
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
  // A herd at the gate: every slot taken, and refusals hand out slots about 0.3 s ahead (real
  // time).
  RegistrationGate& gate = c.registrations();
  std::vector<double> admitted;
  for (int i = 0; i < RegistrationGate::kMaxInFlight; ++i) admitted.push_back(*gate.Begin());
  while (gate.Backlog() < 0.3) ASSERT_FALSE(gate.Begin().ok());
  for (int i = 0; i < 3 * static_cast<int>(opt.reconnect_grace_seconds); ++i) {
    clock.Advance(1);
    c.Tick();
  }
  EXPECT_EQ(c.Get(id, false)->state(), before)
      << "three graces passed while the gate had a backlog: the worker was told to come back later";
  for (double a : admitted) gate.End(a);
  while (gate.Backlog() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < static_cast<int>(opt.reconnect_grace_seconds) - 2; ++i) {
    clock.Advance(1);
    c.Tick();
  }
  EXPECT_EQ(c.Get(id, false)->state(), before) << "the grace runs in full after the herd";
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
