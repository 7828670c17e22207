// A controller restart at the load benchmark's full size (bench/load.py's restart phase: 16,384
// agents of 8 devices, 131,072 devices, 100 jobs running), on a machine too loaded to keep the
// restart's clock: the new controller serves only 15 s after it loaded its state, admits the herd
// through its registration gate at 320 registrations a second, and its agents start reconnecting
// within 3 s of the server opening and read their "come back later" answers up to 12 s late. Two
// runs from a fresh clone on another 2-core machine restarted 100 and then 8 of the 100 running
// jobs after a kill -9 at this size. The rule this replaces gave the ranks the grace from the
// restart, extended only while the gate had slots ahead: here its 10 s ran out before the server
// served, and all 100 jobs restarted at the first tick. Now the grace runs from the gate's
// QuietSince (the server opened, nothing in flight, every refused agent due):
// controller/attempt_lifecycle.cc CheckReconnect.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "controller/registration_gate.h"
#include "tests/controller/controller_fixture.h"

namespace moe::controller {
namespace {

constexpr int kAgents = 16384;
constexpr int kDevicesPerAgent = 8;  // 131,072 devices
constexpr int kJobs = 100;
constexpr int kJobRanks = 8;

moe::v1::Register AgentRegistration(int i) {
  moe::v1::Register r;
  r.set_name("node-" + std::to_string(i));
  r.set_rack("rack-" + std::to_string(i / 64));
  r.set_node(r.name());
  r.set_device("cpu");
  r.set_memory_bytes(int64_t{64} << 30);
  for (int d = 0; d < kDevicesPerAgent; ++d) r.add_devices("cpu");
  return r;
}

// One fake agent: its stream, its session, the ranks it runs, where it is in its reconnect.
struct Agent {
  moe::v1::Register reg;
  std::unique_ptr<FakeChannel> channel = std::make_unique<FakeChannel>();
  std::string session;
  std::vector<moe::v1::RunningRank> running;
  double next_try = 0;   // when it tries next: its reconnect back-off, then the slot it was given
  double admitted = -1;  // in the gate (its registration under way) since then; -1: not
  bool back = false;
};

std::unique_ptr<MetricsAggregator> Metrics(FakeClock& clock) {
  return std::make_unique<MetricsAggregator>(std::make_shared<prometheus::Registry>(), clock,
                                             StragglerOptions{}, 60, "t");
}

// The first controller: 100 jobs of 8 ranks running on the first 100 agents (registered first, so
// that the 100 submits check themselves against 800 devices, not 131,072: the test's time), then
// every other agent registered.
std::vector<std::string> RunJobs(Controller& c, std::vector<Agent>& agents) {
  const size_t running = kJobs * kJobRanks / kDevicesPerAgent;
  auto reg = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      auto r = c.Register(agents[i].reg, agents[i].channel.get());
      ASSERT_TRUE(r.ok()) << r.status();
      agents[i].session = r->session();
    }
  };
  reg(0, running);
  std::vector<std::string> ids;
  for (int j = 0; j < kJobs; ++j) {
    auto job = c.Submit(SpecToProto(Spec("long-" + std::to_string(j), kJobRanks, 1)));
    EXPECT_TRUE(job.ok()) << job.status();
    if (job.ok()) ids.push_back(job->id());
  }
  c.Tick();
  for (size_t i = 0; i < running; ++i) {
    Agent& a = agents[i];
    for (const moe::v1::Assignment& as : a.channel->Assignments()) {
      moe::v1::RunningRank& run = a.running.emplace_back();
      run.set_job_id(as.job_id());
      run.set_attempt(as.attempt());
      run.set_rank(as.rank());
      run.set_device_index(as.device_index());
      moe::v1::WorkerMessage m;
      m.mutable_started()->set_job_id(as.job_id());
      m.mutable_started()->set_attempt(as.attempt());
      m.mutable_started()->set_rank(as.rank());
      EXPECT_TRUE(c.OnWorkerMessage(a.reg.name(), m).ok());
      moe::v1::WorkerMessage step;  // its first step: the job runs
      step.mutable_step()->set_job_id(as.job_id());
      step.mutable_step()->set_attempt(as.attempt());
      step.mutable_step()->set_rank(as.rank());
      step.mutable_step()->mutable_metrics()->set_step(1);
      EXPECT_TRUE(c.OnWorkerMessage(a.reg.name(), step).ok());
    }
  }
  c.Tick();
  for (const std::string& id : ids) EXPECT_EQ(c.Get(id, false)->state(), moe::v1::RUNNING);
  reg(running, agents.size());
  return ids;
}

// The agent's reconnect, through the gate as the gRPC server does it: admitted (its registration
// completes at the next step: the loaded machine takes 0.1 s for one, 32 at a time, 320 a second),
// or told to come back in a slot, which it reads `late` seconds late.
void TryReconnect(RegistrationGate& gate, Agent& a, double now, double late) {
  StatusOr<double> admitted = gate.Begin();
  if (admitted.ok()) {
    a.admitted = *admitted;
    return;
  }
  const std::string& m = admitted.status().message();  // "... retry after N ms"
  const size_t at = m.rfind("retry after ");
  ASSERT_NE(at, std::string::npos) << m;
  a.next_try = now + std::stod(m.substr(at + 12)) / 1000.0 + late;
}

void CompleteReconnect(Controller& c, Agent& a) {
  moe::v1::Register r = a.reg;
  r.set_session(a.session);
  for (const auto& run : a.running) *r.add_running() = run;
  a.channel = std::make_unique<FakeChannel>();
  auto reg = c.Register(r, a.channel.get());
  c.registrations().End(a.admitted);
  a.admitted = -1;
  ASSERT_TRUE(reg.ok()) << reg.status();
  a.back = true;
}

struct Outcome {
  int restarted = 0;     // jobs no longer on their first attempt, or not RUNNING
  double last_back = 0;  // seconds after the server opened
};

// Moves the agents running job `job`'s rank 0 to the end of the list.
void LastRunsJob(std::vector<Agent>& agents, const std::string& job) {
  for (Agent& a : agents) {
    if (!a.running.empty() && a.running[0].job_id() == job && a.running[0].rank() == 0) {
      std::swap(a, agents.back());
      return;
    }
  }
  ADD_FAILURE() << "no agent runs rank 0 of " << job;
}

// `lose_last`: the last agent (one running rank 0 of the first job) tries once as the server opens,
// refused or failing, and never again.
Outcome Restart(bool lose_last) {
  FakeClock clock;
  MemoryStateStore store;
  auto metrics = Metrics(clock);
  ControllerConfig opt;
  opt.lease_seconds = 3600;  // the agents in this test send no beats: leases are not its subject
  std::vector<Agent> agents(kAgents);
  for (int i = 0; i < kAgents; ++i) agents[static_cast<size_t>(i)].reg = AgentRegistration(i);
  std::vector<std::string> jobs;
  {
    Controller first(store, clock, *metrics, opt);
    EXPECT_TRUE(first.Recover().ok());
    jobs = RunJobs(first, agents);
    EXPECT_EQ(jobs.size(), static_cast<size_t>(kJobs));
  }  // kill -9
  if (lose_last) LastRunsJob(agents, jobs[0]);
  const size_t gone = lose_last ? agents.size() - 1 : agents.size();
  Controller c(store, clock, *metrics, opt);
  EXPECT_TRUE(c.Recover().ok());
  clock.Advance(15);  // loading the state and opening the server took 15 s on the loaded machine
  c.registrations().Open();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> backoff(0.0, 3.0), late(0.0, 12.0);
  for (Agent& a : agents) a.next_try = backoff(rng);  // each agent's reconnect back-off
  auto gate_try = [&](Agent& a) {
    StatusOr<double> admitted = c.registrations().Begin();
    a.admitted = admitted.ok() ? *admitted : -1;
    return admitted.ok();
  };
  Outcome out;
  for (int step = 0; step < 6000; ++step) {  // 0.1 s steps, ten minutes at most
    const double now = step * 0.1;
    bool all_back = true;
    for (size_t i = 0; i < agents.size(); ++i) {
      Agent& a = agents[i];
      if (a.back) continue;
      if (i == gone) {  // one try, then gone: a refusal, or a registration that fails
        if (step == 0 && gate_try(a)) c.registrations().End(a.admitted);
        continue;
      }
      if (a.admitted >= 0) {
        CompleteReconnect(c, a);
        out.last_back = now;
      } else if (now >= a.next_try) {
        TryReconnect(c.registrations(), a, now, late(rng));
      }
      all_back = all_back && a.back;
    }
    c.Tick();
    clock.Advance(0.1);
    if (all_back && now > out.last_back + 3 * opt.reconnect_grace_seconds) break;
  }
  for (const std::string& id : jobs) {
    auto job = c.Get(id, false);
    EXPECT_TRUE(job.ok());
    if (job.ok() && (job->attempt() != 1 || job->state() != moe::v1::RUNNING)) ++out.restarted;
  }
  return out;
}

TEST(ControllerHerd, ARestartAtFullSizeRestartsNoJobWhileItsAgentsAreAdmitted) {
  const Outcome o = Restart(false);
  EXPECT_EQ(o.restarted, 0) << "jobs restarted by the controller's restart, its agents all back "
                            << o.last_back << " s after it served";
  EXPECT_GT(o.last_back, 20) << "the herd took longer than two graces: the case the test is about";
}

// The grace still ends: an agent that never comes back costs its job a restart once the herd is
// over, and only that job.
TEST(ControllerHerd, AnAgentThatNeverComesBackRestartsItsJobAfterTheHerd) {
  const Outcome o = Restart(true);
  EXPECT_EQ(o.restarted, 1) << "the lost agent's job, and no other";
}

}  // namespace
}  // namespace moe::controller
