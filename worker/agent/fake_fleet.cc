// Fake mode's node agents on gRPC's callback API (fake_fleet.h).
#include "worker/agent/fake_fleet.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "common/host_id.h"
#include "common/log.h"
#include "common/udp_beat.h"
#include "worker/agent/node_credential.h"
#include "worker/agent/rank_messages.h"
#include "worker/agent/udp_beat_link.h"

namespace moe::worker {

namespace {
constexpr int kAgentsPerLink = 64;          // agents sharing a UDP socket (udp_beat_link.h)
constexpr double kShareWakeSeconds = 0.05;  // how late a due event may go, to share a wake

moe::v1::RankFinished Stopped(const moe::v1::Assignment& a, const std::string& why) {
  const RankEnd end = StoppedRankEnd(why);
  return Finished(a, end, end.exit_code(), /*cancelled=*/true);
}
}  // namespace

// A fake rank: a step every step_seconds_ from `t0` until the job's steps are done.
struct FakeFleet::Rank {
  moe::v1::Assignment a;
  double t0 = 0;
  int64_t step = 0;
  uint64_t id = 0;
};

struct FakeFleet::Agent {
  AgentOptions o;
  int index = 0;
  std::unique_ptr<NodeCredential> credential;
  std::shared_ptr<moe::v1::WorkerService::Stub> stub;
  std::mutex mu;
  FakeSession* session = nullptr;  // the stream now (once ended, the timer thread deletes it)
  uint64_t session_id = 0;         // stale beats of an earlier session find another
  bool registered = false, leaving = false, ended = false;
  std::string leave_reason;
  std::shared_ptr<SessionCredential> session_cred = std::make_shared<SessionCredential>();
  double heartbeat_seconds = 1;
  std::shared_ptr<UdpBeatLink> udp;
  uint64_t lease = 0, seq = 0;
  std::map<int, Rank> ranks;  // by device
  // Step reports of this wake, sent together once it fired (FlushSteps): one message for the
  // node's ranks, as a node agent sends them.
  std::vector<moe::v1::StepReport> steps;
  std::vector<moe::v1::RankFinished> unreported;
  size_t in_registration = 0;   // the first of `unreported` the last registration carried
  std::string controller_root;  // the controller's checkpoint root, where accepted
  double backoff = 0.2, started_at = 0, registration_sent = 0;
  int64_t registrations = 0, ranks_started = 0;
  std::mt19937 rng;
};

double FakeFleet::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

FakeFleet::FakeFleet(const AgentOptions& base, int n, const FakeLayout& layout)
    : step_seconds_(base.fake_step_seconds), per_connection_(std::max(1, layout.per_connection)) {
  std::random_device seed;
  for (int i = 0; i < n; ++i) {
    auto a = std::make_unique<Agent>();
    a->o = base;
    a->index = i;
    if (n > 1) {
      a->o.name = base.name + "-" + std::to_string(i);
      a->o.node = a->o.name;
      if (layout.rack_size > 0) a->o.rack = base.rack + "-" + std::to_string(i / layout.rack_size);
    }
    a->o.client.own_connection = per_connection_ == 1;
    if (per_connection_ > 1) a->o.client.connection_group = i / per_connection_;
    std::string path = base.node_credential_file;
    if (path.empty()) path = base.runtime_dir + "/node-" + a->o.node + ".credential";
    a->credential = std::make_unique<NodeCredential>(a->o.client, path, a->o.node, a->o.rack);
    a->rng.seed(seed());
    agents_.push_back(std::move(a));
  }
  pooled_.resize(static_cast<size_t>((n + per_connection_ - 1) / per_connection_));
}

FakeFleet::~FakeFleet() {
  Stop();
  DeleteEnded();
}

void FakeFleet::Schedule(const Event& e) {
  {
    std::lock_guard lock(mu_);
    due_.push(e);
  }
  wake_.notify_one();
}

Status FakeFleet::Run() {
  const double now = Now();
  for (auto& a : agents_) Schedule({now, a->index, Due::kConnect, 0, 0});
  TimerLoop();  // until Stop
  // Every stream ended (cancelled again while any is left: one may have started meanwhile). No
  // time limit: a session calls back into the fleet until its OnDone, which a cancel brings.
  std::unique_lock lock(mu_);
  for (int k = 1; live_sessions_ > 0; ++k) {
    lock.unlock();
    for (auto& a : agents_) {
      std::lock_guard agent(a->mu);
      if (a->session) a->session->Cancel();
    }
    lock.lock();
    sessions_done_.wait_for(lock, std::chrono::milliseconds(100),
                            [this] { return live_sessions_ == 0; });
    if (k % 100 == 0 && live_sessions_ > 0)
      MOE_LOG(WARNING) << live_sessions_ << " fake agents' streams have not ended after " << k / 10
                       << " s of cancels; waiting";
  }
  lock.unlock();
  DeleteEnded();
  std::lock_guard relock(mu_);
  return fatal_;
}

// Run cancels the streams once its timer loop ended: Stop may be called with an agent's lock held.
void FakeFleet::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
}

void FakeFleet::Fatal(const Status& st) {
  {
    std::lock_guard lock(mu_);
    if (fatal_.ok()) fatal_ = st;
  }
  MOE_LOG(ERROR) << st.message();
  Stop();
}

// Everything due within kShareWakeSeconds fires in one wake: 16,384 agents beating once a second
// wake the thread 20 times a second, not 16,384.
void FakeFleet::TimerLoop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!ended_.empty()) {
      lock.unlock();
      DeleteEnded();
      lock.lock();
      continue;
    }
    if (due_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const double until = due_.top().at - Now();
    if (until > kShareWakeSeconds) {
      wake_.wait_for(lock, std::chrono::duration<double>(until - kShareWakeSeconds / 2));
      continue;
    }
    std::vector<Event> fire;
    const double horizon = Now() + kShareWakeSeconds;
    while (!due_.empty() && due_.top().at <= horizon) {
      fire.push_back(due_.top());
      due_.pop();
    }
    lock.unlock();
    for (const Event& e : fire) {
      if (!stop_) Fire(e);
    }
    for (const Event& e : fire) {  // the steps of this wake, one message per agent
      if (e.what != Due::kStep) continue;
      Agent& a = *agents_[static_cast<size_t>(e.agent)];
      std::lock_guard agent(a.mu);
      FlushSteps(a);
    }
    lock.lock();
  }
}

void FakeFleet::Fire(const Event& e) {
  Agent& a = *agents_[static_cast<size_t>(e.agent)];
  switch (e.what) {
    case Due::kConnect:
      return Connect(a);
    case Due::kBeat:
      return Beat(a, e.token);
    case Due::kStep:
      return Step(a, e.device, e.token);
  }
}

// What the agent tells the controller when it (re)connects: who and where it is, its devices, the
// ranks it still runs, and the outcomes the controller has not heard. With a.mu.
void FakeFleet::Registration(Agent& a, moe::v1::Register* r) {
  r->set_name(a.o.name);
  r->set_rack(a.o.rack);
  r->set_node(a.o.node);
  r->set_device(a.o.devices.front());
  if (a.o.devices.size() > 1)
    for (const auto& d : a.o.devices) r->add_devices(d);
  r->set_address(a.o.address);
  r->set_version(MOE_VERSION);
  r->set_cpu_cores(static_cast<int>(std::thread::hardware_concurrency()));
  double memory = a.o.memory_gb * 1e9;  // as a node agent reports it
  if (memory <= 0 && a.o.devices.front() == "cpu")
    memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
             static_cast<double>(::sysconf(_SC_PAGESIZE));
  r->set_memory_bytes(static_cast<int64_t>(memory));
  for (const auto& d : a.o.data_roots) r->add_data_roots(d);
  for (const auto& c : a.o.checkpoint_roots) r->add_checkpoint_roots(c);
  r->set_uses_default_checkpoint_roots(a.o.default_checkpoint_roots);
  r->set_host_id(ThisHostId());
  r->set_session(a.session_cred->Get());
  for (const auto& [device, rank] : a.ranks) {
    auto* run = r->add_running();
    run->set_job_id(rank.a.job_id());
    run->set_attempt(rank.a.attempt());
    run->set_rank(rank.a.rank());
    run->set_device_index(device);
  }
  for (const auto& f : a.unreported) *r->add_finished() = f;
  a.in_registration = a.unreported.size();
}

// On the timer thread: the node credential (a call only while bootstrapping), then the stream.
void FakeFleet::Connect(Agent& a) {
  if (stop_) return;
  std::shared_ptr<moe::v1::WorkerService::Stub> stub;
  {
    std::lock_guard lock(a.mu);
    if (a.ended || a.session) return;
    if (per_connection_ > 1) a.stub = pooled_[static_cast<size_t>(a.index / per_connection_)];
    if (!a.stub) {
      auto channel = MakeChannel(a.o.client);
      if (!channel.ok()) {
        a.ended = true;
        Fatal(channel.status());
        return;
      }
      a.stub = moe::v1::WorkerService::NewStub(*channel);
      if (per_connection_ > 1) pooled_[static_cast<size_t>(a.index / per_connection_)] = a.stub;
    }
    stub = a.stub;
  }
  std::string token;
  if (Status st = a.credential->Ensure(*stub, &token); !st.ok()) {
    if (st.code() != StatusCode::kUnavailable) return Fatal(st);
    MOE_LOG(WARNING) << a.o.name << ": " << st.message() << " (trying again in 5 s)";
    return Schedule({Now() + 5, a.index, Due::kConnect, 0, 0});
  }
  FakeSession* s = nullptr;
  {
    std::lock_guard lock(a.mu);
    a.o.client.token = token;
    moe::v1::WorkerMessage reg;
    Registration(a, reg.mutable_register_());
    s = new FakeSession(this, a.index, std::move(reg));
    a.session = s;
    a.session_id = next_id_++;
    a.registered = false;
    a.started_at = a.registration_sent = Now();
  }
  {
    std::lock_guard lock(mu_);
    ++live_sessions_;
  }
  s->Start(*stub, a.o.client);
}

bool FakeFleet::Send(Agent& a, const moe::v1::WorkerMessage& m) {
  return a.session != nullptr && a.session->Send(m);
}

void FakeFleet::FlushSteps(Agent& a) {
  for (size_t i = 0; i < a.steps.size(); i += kMaxStepsPerMessage) {  // the controller's bound
    moe::v1::WorkerMessage m;
    for (size_t k = i; k < std::min(a.steps.size(), i + kMaxStepsPerMessage); ++k)
      *m.mutable_steps()->add_reports() = std::move(a.steps[k]);
    Send(a, m);  // dropped without a session, as a node agent's
  }
  a.steps.clear();
}

void FakeFleet::Report(Agent& a, const moe::v1::RankFinished& f) {
  FlushSteps(a);  // a rank's last step before its end
  moe::v1::WorkerMessage m;
  *m.mutable_finished() = f;
  if (!Send(a, m)) a.unreported.push_back(f);
}

// The UDP datagram of this beat, and the stream's heartbeat until one of the last two was
// acknowledged; then the next beat.
void FakeFleet::Beat(Agent& a, uint64_t session) {
  double every = 1;
  {
    std::lock_guard lock(a.mu);
    if (a.session_id != session || !a.session || !a.registered) return;
    bool heard = false;
    if (a.udp) {
      const uint64_t seq = ++a.seq;
      const uint64_t acked = a.udp->Beat(a.lease, seq);
      heard = acked > 0 && acked + 2 >= seq;
    }
    if (!heard) {
      moe::v1::WorkerMessage hb;
      hb.mutable_heartbeat()->set_time(
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count());
      Send(a, hb);
    }
    every = a.heartbeat_seconds;
  }
  Schedule({Now() + every, a.index, Due::kBeat, 0, session});
}

void FakeFleet::Step(Agent& a, int device, uint64_t id) {
  std::lock_guard lock(a.mu);
  auto it = a.ranks.find(device);
  if (it == a.ranks.end() || it->second.id != id) return;  // cancelled, or another rank's now
  Rank& r = it->second;
  const int64_t steps = r.a.spec().spec().training().steps();
  if (r.step < steps) {
    ++r.step;
    moe::v1::WorkerMessage m = AboutRank(r.a, /*started=*/false);
    auto* mt = m.mutable_step()->mutable_metrics();
    mt->set_step(r.step);
    mt->set_total_steps(steps);
    mt->set_loss(10.0 / (1.0 + 0.01 * static_cast<double>(r.step)));
    mt->set_step_seconds(step_seconds_);
    const auto& data = r.a.spec().spec().data();
    const int64_t tokens = data.global_batch_size() * data.seq_length();  // one global batch
    mt->set_tokens_per_second(static_cast<double>(tokens) / step_seconds_);
    mt->set_tokens(tokens);
    a.steps.push_back(std::move(*m.mutable_step()));
  }
  if (r.step < steps) {
    Schedule(
        {r.t0 + step_seconds_ * static_cast<double>(r.step + 1), a.index, Due::kStep, device, id});
    return;
  }
  RankEnd end;
  end.checkpoint_step = steps;  // a trainer's success ends with its final checkpoint
  Report(a, Finished(r.a, end, end.exit_code(), false));
  a.ranks.erase(it);
}

bool FakeFleet::AcceptEpoch(int64_t epoch, const std::string& what) {
  return AcceptControllerEpoch(&max_epoch_, epoch, what);
}

void FakeFleet::OnMessage(int agent, FakeSession* s, const moe::v1::ControllerMessage& m) {
  Agent& a = *agents_[static_cast<size_t>(agent)];
  switch (m.msg_case()) {
    case moe::v1::ControllerMessage::kRegistered:
      if (AcceptEpoch(m.registered().epoch(), "a registration"))
        Registered(a, s, m.registered());
      else
        s->Cancel();  // a stale controller
      return;
    case moe::v1::ControllerMessage::kAssign:
      if (AcceptEpoch(m.assign().epoch(), "an assignment of " + m.assign().job_id()))
        Assign(a, m.assign());
      return;
    case moe::v1::ControllerMessage::kCancel:
      return CancelRanks(a, m.cancel().job_id(), m.cancel().attempt());
    case moe::v1::ControllerMessage::kLogs:
      return ServeLogs(a, m.logs());
    default:
      return;
  }
}

void FakeFleet::SetUdpLease(Agent& a, const moe::v1::Registered& r) {
  if (a.udp) a.udp->Remove(a.lease);
  a.udp.reset();
  a.lease = a.seq = 0;
  if (r.heartbeat_udp_port() == 0 || r.heartbeat_udp_port() > 65535 ||
      r.heartbeat_lease_id() == 0 || r.heartbeat_key().size() != beat::kKeyBytes) {
    return;  // none granted: heartbeats on the stream
  }
  const std::string host = UdpHostOf(CurrentAddress(a.o.client));
  if (host.empty()) return;
  a.udp =
      UdpBeatLink::For(host, static_cast<int>(r.heartbeat_udp_port()), a.index / kAgentsPerLink);
  if (!a.udp) return;
  a.lease = r.heartbeat_lease_id();
  a.udp->Add(a.lease, r.heartbeat_key());
}

void FakeFleet::Registered(Agent& a, FakeSession* s, const moe::v1::Registered& r) {
  uint64_t session = 0;
  {
    std::lock_guard lock(a.mu);
    if (a.session != s) return;
    a.heartbeat_seconds = r.heartbeat_seconds() > 0 ? r.heartbeat_seconds() : 1.0;
    a.session_cred->Set(r.session());
    SetUdpLease(a, r);
    a.registered = true;
    ++a.registrations;
    // Delivered with the registration; those that came since go with the next.
    a.unreported.erase(a.unreported.begin(),
                       a.unreported.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                  a.in_registration, a.unreported.size())));
    a.in_registration = 0;
    if (a.o.default_checkpoint_roots) {
      const std::string why = r.checkpoint_root().empty() ? "" : UnusableRoot(r.checkpoint_root());
      a.controller_root = why.empty() ? r.checkpoint_root() : "";
      if (!r.checkpoint_root().empty()) Send(a, RootMounted(r.checkpoint_root(), why));
    }
    if (a.leaving) {  // a reconnect during a clean stop: the controller hears it again
      moe::v1::WorkerMessage m;
      m.mutable_leaving()->set_reason(a.leave_reason);
      Send(a, m);
    }
    const double took = Now() - a.registration_sent;
    if (took > 2.0) {
      MOE_LOG(WARNING) << "the controller's answer to " << a.o.name << "'s registration came "
                       << took << " s after it was sent: its lease may have run out before its "
                       << "first beat";
    }
    session = a.session_id;
  }
  MOE_LOG(INFO) << "registered with the controller at " << CurrentAddress(a.o.client) << " as "
                << a.o.name << " (rack " << a.o.rack << ", node " << a.o.node << ", "
                << a.o.devices.size() << " device(s))";
  Beat(a, session);  // the lease runs from the answer: its first beat now
}

void FakeFleet::Assign(Agent& a, const moe::v1::Assignment& asg) {
  std::lock_guard lock(a.mu);
  const int device = asg.device_index();
  if (device < 0 || device >= static_cast<int>(a.o.devices.size())) {
    return Report(a, NotRun(asg, FailureClass::kTransient, StatusCode::kInvalidArgument,
                            "worker " + a.o.name + " has no device " + std::to_string(device)));
  }
  if (auto it = a.ranks.find(device); it != a.ranks.end()) {  // a stale attempt: it stops first
    Report(a, Stopped(it->second.a, "stopped (fake rank)"));
    a.ranks.erase(it);
  }
  if (a.leaving) {
    return Report(a, NotRun(asg, FailureClass::kTransient, StatusCode::kUnavailable,
                            "worker " + a.o.name + " is leaving (" + a.leave_reason + ")"));
  }
  std::vector<std::string> roots = a.o.checkpoint_roots;
  if (!a.controller_root.empty()) roots.push_back(a.controller_root);
  if (Status st = CheckAssignmentPaths(asg, a.o.data_roots, roots); !st.ok()) {
    MOE_LOG(ERROR) << "refusing rank " << asg.rank() << " of " << asg.job_id() << ": "
                   << st.message();
    return Report(a, NotRun(asg, FailureClass::kPermanent, StatusCode::kFailedPrecondition,
                            "worker " + a.o.name + " refused the rank: " + st.message()));
  }
  Rank& r = a.ranks[device];
  r = Rank{asg, Now(), 0, next_id_++};
  ++a.ranks_started;
  Send(a, AboutRank(asg, /*started=*/true));
  Schedule({r.t0 + step_seconds_, a.index, Due::kStep, device, r.id});
}

// A fake rank stops at once (it has no step to finish) and is reported stopped.
void FakeFleet::CancelRanks(Agent& a, const std::string& job, int attempt) {
  std::lock_guard lock(a.mu);
  for (auto it = a.ranks.begin(); it != a.ranks.end();) {
    const moe::v1::Assignment& asg = it->second.a;
    if (asg.job_id() != job || asg.attempt() != attempt) {
      ++it;
      continue;
    }
    MOE_LOG(INFO) << "stopping fake rank " << asg.rank() << " of " << job << " on " << a.o.name;
    Report(a, Stopped(asg, "stopped (fake rank)"));
    it = a.ranks.erase(it);
  }
}

void FakeFleet::ServeLogs(Agent& a, const moe::v1::LogRequest& req) {
  moe::v1::WorkerMessage m;
  auto* r = m.mutable_log_reply();
  r->set_request_id(req.request_id());
  r->set_error("worker " + a.o.name + " runs fake ranks, which write no output");
  r->set_ended(true);
  std::lock_guard lock(a.mu);
  Send(a, m);
}

// A connect that failed before the controller said anything: logged at the first of the fleet's
// and then every 30 s with how many failed since (16,384 agents retrying each second).
void FakeFleet::Unreachable(Agent& a, const grpc::Status& st) {
  std::lock_guard lock(mu_);
  const double now = Now();
  if (unreachable_++ == 0 || now - unreachable_logged_ >= 30) {
    MOE_LOG(WARNING) << "cannot reach the controller at " << CurrentAddress(a.o.client) << ": "
                     << st.error_message() << " (" << unreachable_
                     << " failed connects of the fake agents since one was last reached; "
                     << "retrying, logged every 30 s)";
    unreachable_logged_ = now;
  }
}

// How long the agent waits before it connects again, and what the stream's end says about it.
double FakeFleet::RetryWait(Agent& a, const grpc::Status& st, bool answered) {
  const std::string& why = st.error_message();
  if (const double hint = RetryHintSeconds(why);
      hint > 0 && st.error_code() == grpc::StatusCode::UNAVAILABLE)
    return hint;  // a herd: as long as the controller said (it jittered it)
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED && why == "unknown token") {
    a.credential->Forget();  // dropped by the controller: the node bootstraps again
  } else if ((st.error_code() == grpc::StatusCode::PERMISSION_DENIED &&
              why.rfind("revoked:", 0) == 0) ||
             (st.error_code() == grpc::StatusCode::ABORTED &&
              why.find("superseded") != std::string::npos)) {
    MOE_LOG(ERROR) << a.o.name << ": the controller ended this agent: " << why;
    a.ended = true;  // the controller counts its ranks lost already
    return -1;
  } else if (st.error_code() == grpc::StatusCode::ALREADY_EXISTS && a.session_cred->Get().empty()) {
    Fatal(AlreadyExistsError("the controller refused the name " + a.o.name + ": " + why));
    return -1;
  } else if (!answered && st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    Unreachable(a, st);
    if (per_connection_ == 1) {  // a fresh channel: one remembers its failures and backs off
      a.stub.reset();
      if (ControllerAddresses(a.o.client.address).size() > 1) ++a.o.client.address_turn;
    }
  } else if (!stop_) {
    MOE_LOG(WARNING) << a.o.name << " lost the controller stream (" << why << "); reconnecting";
  }
  if (Now() - a.started_at > 10) a.backoff = 0.2;  // a session that lasted: come back soon
  // Jittered (50-100 % of the backoff): a herd must not come back in lockstep.
  const double wait = a.backoff * std::uniform_real_distribution<double>(0.5, 1.0)(a.rng);
  a.backoff = std::min(a.backoff * 2, 1.0);
  return wait;
}

void FakeFleet::OnEnded(int agent, FakeSession* s, const grpc::Status& st, bool answered,
                        std::vector<moe::v1::WorkerMessage> unsent) {
  Agent& a = *agents_[static_cast<size_t>(agent)];
  double wait = -1;
  {
    std::lock_guard lock(a.mu);
    for (auto& m : unsent) {  // a rank's outcome never written: the next registration carries it
      if (m.has_finished()) a.unreported.push_back(std::move(*m.mutable_finished()));
    }
    if (a.session == s) {
      a.session = nullptr;
      a.registered = false;
      SetUdpLease(a, moe::v1::Registered());
      if (!stop_) wait = RetryWait(a, st, answered);
      if (answered) {
        std::lock_guard fleet(mu_);
        unreachable_ = 0;
      }
    }
  }
  if (wait >= 0 && !stop_) Schedule({Now() + wait, a.index, Due::kConnect, 0, 0});
  // Nothing touches s or the fleet after this (Run may return once no session is live).
  std::lock_guard lock(mu_);
  ended_.push_back(s);
  wake_.notify_one();
  if (--live_sessions_ == 0) sessions_done_.notify_all();
}

// Off gRPC's threads, with no lock held (a channel's end may join gRPC's threads, which call back
// into the fleet): the sessions gRPC is done with.
void FakeFleet::DeleteEnded() {
  std::vector<FakeSession*> ended;
  {
    std::lock_guard lock(mu_);
    ended.swap(ended_);
  }
  for (FakeSession* s : ended) delete s;
}

void FakeFleet::Leave(const std::string& reason) {
  MOE_LOG(INFO) << "fake agents leaving: " << reason;
  for (auto& p : agents_) {
    Agent& a = *p;
    std::lock_guard lock(a.mu);
    a.leaving = true;
    a.leave_reason = reason;
    moe::v1::WorkerMessage m;
    m.mutable_leaving()->set_reason(reason);
    Send(a, m);
    for (const auto& [device, rank] : a.ranks)
      Report(a, Stopped(rank.a, "stopped (fake rank): " + reason));
    a.ranks.clear();
  }
  for (int k = 0; k < 40; ++k) {  // their messages written: at most 2 s
    size_t pending = 0;
    for (auto& a : agents_) {
      std::lock_guard lock(a->mu);
      if (a->session) pending += a->session->Pending();
    }
    if (pending == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Stop();
}

std::vector<AgentView> FakeFleet::Views() {
  std::vector<AgentView> out;
  out.reserve(agents_.size());
  for (auto& p : agents_) {
    Agent& a = *p;
    std::lock_guard lock(a.mu);
    AgentView v{a.o.name, a.o.node, a.o.rack, a.o.client.address, {}};
    v.state.registered = a.registered;
    v.state.leaving = a.leaving;
    v.state.devices = static_cast<int>(a.o.devices.size());
    v.state.ranks_running = static_cast<int>(a.ranks.size());
    v.state.registrations = a.registrations;
    v.state.ranks_started = a.ranks_started;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace moe::worker
