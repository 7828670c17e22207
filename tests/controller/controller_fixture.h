// The controller tests' shared fixture: a fake clock, fake worker streams and helpers to submit,
// step, finish and lose workers (tests/controller/controller_*test.cc, one test program).
#pragma once
// One fixture for every file of the program (gtest wants one class per suite): in moe::controller,
// not in an anonymous namespace, its helpers inline.

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
#include "controller/controller.h"
#include "tests/controller/flaky_store.h"

namespace moe::controller {

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

inline JobSpec Spec(const std::string& name, int world, int ep, int priority = 0,
                    int max_restarts = 3) {
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
      controller_->SchedulePass();  // the tick's pass a registration asks for
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
  // A worker's message, then what the next tick would do with it: fold a step report in (kept until
  // then, off the change lock), run the pass a rank's end asks for (within 100 ms in
  // moe-controller, once for a burst).
  void Msg(const std::string& worker, const moe::v1::WorkerMessage& m) {
    const Status st = controller_->OnWorkerMessage(worker, m);
    EXPECT_TRUE(st.ok()) << st;
    if (m.has_step()) controller_->FoldSteps();
    if (m.has_finished()) controller_->SchedulePass();
  }
  // A rank's step report as its worker sends it.
  static moe::v1::WorkerMessage StepMessage(const moe::v1::Assignment& a, int64_t step,
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
    return m;
  }
  void Step(const std::string& worker, const moe::v1::Assignment& a, int64_t step,
            double compute = 0.1, int64_t checkpoint_step = 0) {
    last_step_[a.job_id() + "/" + std::to_string(a.attempt())] = step;
    Msg(worker, StepMessage(a, step, compute, checkpoint_step));
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

}  // namespace moe::controller
