// The node agent's session with the controller: its node credential, registration, heartbeats,
// the stream it serves, logs asked for, a clean leave. The ranks it runs: agent_ranks.cc.
#include "worker/agent/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/confined_dir.h"
#include "common/file_util.h"
#include "common/host_id.h"
#include "common/job_spec_proto.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "common/rank_end.h"
#include "common/udp_beat.h"
#include "common/yaml.h"
#include "worker/agent/heartbeat_ticker.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/rank_messages.h"
#include "worker/agent/step_report.h"

namespace moe::worker {

WorkerAgent::WorkerAgent(AgentOptions options)
    : o_(std::move(options)),
      credential_(o_.client,
                  o_.node_credential_file.empty()
                      ? JoinPath(o_.runtime_dir, "node-" + o_.node + ".credential")
                      : o_.node_credential_file,
                  o_.node, o_.rack) {}

WorkerAgent::~WorkerAgent() {
  Stop();
  StopRanks(-1);
}

void WorkerAgent::Stop() {
  stop_ = true;
  MutexLock lock(&stream_mu_);
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

void WorkerAgent::Leave(const std::string& reason) {
  size_t running = 0;
  {
    MutexLock lock(&ranks_mu_);
    if (leaving_) return;
    leave_reason_ = reason;
    leaving_ = true;
    running = ranks_.size();
  }
  MOE_LOG(INFO) << "leaving (" << reason << "): "
                << (running == 0 ? std::string("no rank runs here")
                    : running == 1
                        ? std::string("its rank checkpoints at its next step boundary and stops")
                        : std::to_string(running) +
                              " ranks checkpoint at their next step boundary and stop");
  SendLeaving();
  StopRanks(-1);  // their monitors report the ranks' ends on the stream
  Stop();
}

std::string WorkerAgent::LeaveReason() {
  MutexLock lock(&ranks_mu_);
  return leave_reason_;
}

void WorkerAgent::SendLeaving() {
  moe::v1::WorkerMessage m;
  m.mutable_leaving()->set_reason(LeaveReason());
  Write(m);
}

bool WorkerAgent::Write(const moe::v1::WorkerMessage& msg) {
  MutexLock lock(&stream_mu_);
  return stream_ && stream_->Write(msg);
}

std::string WorkerAgent::PeakCachePath(int threads) const {
  return o_.runtime_dir + "/cpu-peak-t" + std::to_string(threads) + ".txt";
}

// A CPU worker with --threads measures the peak its ranks' MFU is counted against now, before any
// job waits for it (moe-train --measure-peak; the ranks read it with --peak-cache).
void WorkerAgent::MeasurePeakAhead() {
  if (o_.devices.front() != "cpu" || o_.threads <= 0) return;
  RankCommand cmd;
  cmd.program = o_.trainer;
  cmd.args = {"--measure-peak", PeakCachePath(o_.threads), "--threads", std::to_string(o_.threads)};
  cmd.report_stream = false;
  auto p = RankProcess::Start(cmd);
  if (!p.ok()) {
    MOE_LOG(WARNING) << "measuring the CPU peak ahead: " << p.status()
                     << " (the first rank measures it)";
    return;
  }
  std::thread([proc = std::shared_ptr<RankProcess>(std::move(*p))] {
    while (proc->Pump(
        1.0, [](const std::string&) {}, [](const std::string&) {})) {
    }
    proc->Wait();
  }).detach();
}

// After a failed session: a fresh channel, to the next controller where several are named (a
// leader and its standbys: a standby refused us, or the one we had is gone).
void WorkerAgent::NextController(std::shared_ptr<moe::v1::WorkerService::Stub>* stub) {
  stub->reset();
  if (ControllerAddresses(o_.client.address).size() > 1) ++o_.client.address_turn;
}

Status WorkerAgent::Run() {
  MOE_RETURN_IF_ERROR(MakeDirs(o_.runtime_dir));
  MeasurePeakAhead();
  double backoff = 0.2;
  std::mt19937 rng(std::random_device{}());
  std::shared_ptr<moe::v1::WorkerService::Stub> stub;
  while (!stop_) {
    // A fresh channel after a failed connect: a channel remembers its failures and backs off on its
    // own, which would keep a restarted controller waiting for us.
    if (!stub) {
      MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(o_.client));
      stub =
          std::shared_ptr<moe::v1::WorkerService::Stub>(moe::v1::WorkerService::NewStub(channel));
    }
    if (!Credential(*stub)) {
      if (stop_) break;
      NextController(&stub);
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff * 5));
      backoff = std::min(backoff * 2, 6.0);  // a held node credential: every 30 s at most
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!Session(stub)) NextController(&stub);
    if (stop_) break;
    // A session that lasted is a reconnect after a controller restart: try again soon.
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) backoff = 0.2;
    // Jittered (50-100% of the backoff): thousands of workers that lost one controller must not
    // come back to the next in lockstep (bench/load.py: a synchronized herd of 4,096 never
    // converged).
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    // A registration refused for a herd waits as long as the controller said (it jitters the hint).
    const double wait = retry_after_ > 0 ? retry_after_ : backoff * jitter(rng);
    retry_after_ = 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    backoff =
        std::min(backoff * 2, 1.0);  // reconnecting is cheap; a restarted controller waits for us
  }
  StopRanks(-1);
  return fatal_;
}

// The node credential to present (node_credential.h); false to try again later (logged at most
// every 30 s), or with stop_ set when it cannot work (a revoked credential, a refused bootstrap
// token).
bool WorkerAgent::Credential(moe::v1::WorkerService::Stub& stub) {
  std::string token;
  const Status st = credential_.Ensure(stub, &token);
  if (st.ok()) {
    o_.client.token = token;  // this thread alone reads it (sessions and the ranks' proxies)
    return true;
  }
  if (st.code() != StatusCode::kUnavailable) {
    fatal_ = st;
    stop_ = true;
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - credential_logged_ >= std::chrono::seconds(30)) {
    MOE_LOG(WARNING) << st.message() << " (trying again; logged every 30 s)";
    credential_logged_ = now;
  }
  return false;
}

// What this agent tells the controller when it (re)connects: who and where it is, its devices, the
// ranks it still runs, and the outcomes the controller has not heard.
void WorkerAgent::Registration(moe::v1::Register* r) {
  r->set_name(o_.name);
  r->set_rack(o_.rack);
  r->set_node(o_.node);
  r->set_device(o_.devices.front());
  if (o_.devices.size() > 1)
    for (const auto& d : o_.devices) r->add_devices(d);
  r->set_address(o_.address);
  r->set_version(MOE_VERSION);
  r->set_cpu_cores(static_cast<int>(std::thread::hardware_concurrency()));
  double memory = o_.memory_gb * 1e9;
  if (memory <= 0 && o_.devices.front() == "cpu")
    memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
             static_cast<double>(::sysconf(_SC_PAGESIZE));
  r->set_memory_bytes(static_cast<int64_t>(memory));
  for (const auto& d : o_.data_roots) r->add_data_roots(d);
  for (const auto& c : o_.checkpoint_roots) r->add_checkpoint_roots(c);
  r->set_uses_default_checkpoint_roots(o_.default_checkpoint_roots);
  // The machine (common/host_id.h): workers started with different --node on one host still share
  // its cores.
  r->set_host_id(ThisHostId());
  r->set_session(session_->Get());  // keeps this worker's name across reconnects
  MutexLock lock(&ranks_mu_);
  for (const auto& [device, rank] : ranks_) {
    if (rank->done) continue;
    auto* run = r->add_running();
    run->set_job_id(rank->assignment.job_id());
    run->set_attempt(rank->assignment.attempt());
    run->set_rank(rank->assignment.rank());
    run->set_device_index(device);
  }
  for (const auto& f : unreported_) *r->add_finished() = f;
}

bool WorkerAgent::Session(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, o_.client,
                 0);  // the stream lives as long as the worker; keepalive finds dead peers
  {
    MutexLock lock(&stream_mu_);
    stream_ = stub->Connect(&ctx);
    stream_ctx_ = &ctx;
  }
  moe::v1::WorkerMessage reg;
  Registration(reg.mutable_register_());
  registration_sent_ = std::chrono::steady_clock::now();
  if (!Write(reg)) {
    MutexLock lock(&stream_mu_);
    const grpc::Status st = stream_->Finish();
    const auto now = std::chrono::steady_clock::now();
    if (unreachable_++ == 0 || now - unreachable_logged_ >= std::chrono::seconds(30)) {
      MOE_LOG(WARNING) << "cannot reach the controller at " << CurrentAddress(o_.client) << ": "
                       << st.error_message() << " (try " << unreachable_
                       << " since it was last reached; retrying, logged every 30 s)";
      unreachable_logged_ = now;
    }
    stream_.reset();
    stream_ctx_ = nullptr;
    return false;
  }
  if (unreachable_ > 1)
    MOE_LOG(INFO) << "reached the controller at " << CurrentAddress(o_.client) << " after "
                  << unreachable_ << " failed tries";
  unreachable_ = 0;
  // Heartbeats from the process's one ticker thread, or its group's
  // (worker/agent/heartbeat_ticker.h).
  // A beat the UDP path does not carry goes on the stream, from the ticker's slow lane: a write
  // that blocks must not hold up the UDP beats of the ticker's other agents. None before the
  // registration's answer: no lease runs yet, and the controller reads the stream's next message
  // only once it has answered (16,384 agents waiting in a herd sent 1,500 such beats a second).
  HeartbeatTicker& ticker = HeartbeatTicker::Process();
  auto beat_id = std::make_shared<std::atomic<int64_t>>(0);
  const int64_t beat = ticker.Add(
      [this, &ticker, beat_id] {
        if (stop_ || !registered_ || UdpBeat()) return;
        ticker.Slow(beat_id->load(), [this] {
          moe::v1::WorkerMessage hb;
          hb.mutable_heartbeat()->set_time(
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                  .count());
          Write(hb);
        });
      },
      [this] { return heartbeat_seconds_.load(); });
  beat_id->store(beat);
  ServeSession(stub);
  registered_ = false;
  ticker.Remove(beat);
  SetUdpLease(moe::v1::Registered());
  MutexLock lock(&stream_mu_);
  const grpc::Status st = stream_->Finish();
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
      st.error_message() == "unknown token") {
    credential_.Forget();  // dropped by the controller: the node bootstraps again
  } else if ((st.error_code() == grpc::StatusCode::PERMISSION_DENIED &&
              st.error_message().rfind("revoked:", 0) == 0) ||
             (st.error_code() == grpc::StatusCode::ABORTED &&
              st.error_message().find("superseded") != std::string::npos)) {
    // Revoked (moectl delete node), or a newer agent of this node took its names: this one is
    // done, and its ranks with it (the controller counts them lost already).
    fatal_ = PermissionDeniedError("the controller ended this agent: " + st.error_message());
    MOE_LOG(ERROR) << fatal_.message();
    stop_ = true;
  } else if (st.error_code() == grpc::StatusCode::ALREADY_EXISTS && session_->Get().empty()) {
    // Our first registration, and the name is another live worker's: retrying cannot help.
    fatal_ = AlreadyExistsError("the controller refused the name " + o_.name + ": " +
                                st.error_message() +
                                ". Each moe-worker needs its own name: pass --name (the default, "
                                "<node>-cpu or <node>-gpuN, is the same for "
                                "two workers of one device type on one host)");
    stop_ = true;
  } else if (st.error_code() == grpc::StatusCode::UNAVAILABLE &&
             (retry_after_ = RetryHintSeconds(st.error_message())) > 0) {
    MOE_LOG(INFO) << "the controller is busy admitting others (" << st.error_message()
                  << "); registering again in " << retry_after_ << " s";
  } else if (!stop_) {
    MOE_LOG(WARNING) << "lost the controller stream (" << st.error_message() << "); reconnecting";
  }
  stream_.reset();
  stream_ctx_ = nullptr;
  // A registration the controller refused for a herd came over a connection that works: the next
  // try reuses it (a fresh one each time was a TCP handshake per retry, 16,384 agents retrying
  // over and over while the controller admitted a few at a time). Anything else: a fresh channel.
  return retry_after_ > 0;
}

void WorkerAgent::SetUdpLease(const moe::v1::Registered& r) {
  MutexLock lock(&udp_mu_);
  if (udp_link_) udp_link_->Remove(udp_lease_);
  udp_link_.reset();
  udp_lease_ = udp_seq_ = 0;
  if (r.heartbeat_udp_port() == 0 || r.heartbeat_udp_port() > 65535 ||
      r.heartbeat_lease_id() == 0 || r.heartbeat_key().size() != beat::kKeyBytes) {
    return;  // none granted: heartbeats on the stream
  }
  const std::string host =
      UdpHostOf(CurrentAddress(o_.client));  // the controller we registered with
  if (host.empty()) return;
  udp_link_ = UdpBeatLink::For(host, static_cast<int>(r.heartbeat_udp_port()));
  if (!udp_link_) return;
  udp_lease_ = r.heartbeat_lease_id();
  udp_link_->Add(udp_lease_, r.heartbeat_key());
}

bool WorkerAgent::UdpBeat() {
  MutexLock lock(&udp_mu_);
  if (!udp_link_) return false;
  const uint64_t seq = ++udp_seq_;
  const uint64_t acked = udp_link_->Beat(udp_lease_, seq);
  return acked > 0 && acked + 2 >= seq;
}

// A controller's fencing epoch against the highest this worker has seen: a lower one is a stale
// controller (another took over its state since), whose word no longer counts.
bool WorkerAgent::AcceptEpoch(int64_t epoch, const std::string& what) {
  return AcceptControllerEpoch(&max_epoch_, epoch, what);
}

// An answer that came later than a lease would last: the controller's lease ran from its sending,
// so this agent may be declared lost before its first beat (a process too busy to read its
// streams, a connection that stalled).
void WorkerAgent::NoteLateAnswer() const {
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - registration_sent_).count();
  if (took > 2.0) {
    MOE_LOG(WARNING) << "the controller's answer to " << o_.name << "'s registration came " << took
                     << " s after it was sent: its lease may have run out before its first beat";
  }
}

// Reads the controller's messages until the stream ends.
void WorkerAgent::ServeSession(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub) {
  moe::v1::ControllerMessage msg;
  while (ReaderStream()->Read(&msg)) {
    switch (msg.msg_case()) {
      case moe::v1::ControllerMessage::kRegistered: {
        if (!AcceptEpoch(msg.registered().epoch(), "its registration"))
          return;  // a stale controller
        heartbeat_seconds_ =
            msg.registered().heartbeat_seconds() > 0 ? msg.registered().heartbeat_seconds() : 1.0;
        session_->Set(msg.registered().session());
        SetUdpLease(msg.registered());
        AcceptCheckpointRoot(msg.registered().checkpoint_root());
        registered_ = true;
        UdpBeat();  // the lease runs from the answer: its first beat now, not at the ticker's turn
        NoteLateAnswer();
        ++registrations_;
        MOE_LOG(INFO) << "registered with the controller at " << CurrentAddress(o_.client) << " as "
                      << o_.name << " (rack " << o_.rack << ", node " << o_.node << ", "
                      << o_.devices.front()
                      << (o_.devices.size() > 1
                              ? " and " + std::to_string(o_.devices.size() - 1) + " more devices"
                              : std::string())
                      << ")";
        if (leaving_)
          SendLeaving();  // a reconnect during a clean stop: the controller hears it again
        MutexLock lock(&ranks_mu_);
        unreported_.clear();  // delivered with the registration
        break;
      }
      case moe::v1::ControllerMessage::kAssign:
        if (AcceptEpoch(msg.assign().epoch(), "an assignment of " + msg.assign().job_id()))
          StartRank(stub, msg.assign());
        break;
      case moe::v1::ControllerMessage::kCancel:
        CancelRank(msg.cancel().job_id(), msg.cancel().attempt(), msg.cancel().reason(),
                   msg.cancel().now());
        break;
      case moe::v1::ControllerMessage::kLogs:
        ServeLogs(msg.logs());
        break;
      default:
        break;
    }
  }
}

// Stops the rank that runs now (SIGTERM: it stops at its next step boundary; SIGKILL after the
// grace) and joins its monitor. moectl logs: a slice of a rank's log file here, running or not.
void WorkerAgent::ServeLogs(const moe::v1::LogRequest& req) {
  moe::v1::WorkerMessage m;
  auto* r = m.mutable_log_reply();
  r->set_request_id(req.request_id());
  const std::string path = RankLogPath(o_.runtime_dir, req.job_id(), req.attempt(), req.rank());
  auto slice = ReadRankLog(path, req.offset(), req.tail_lines());
  if (!slice.ok()) {
    r->set_error("worker " + o_.name + " has no output of rank " + std::to_string(req.rank()) +
                 " of " + req.job_id() + " attempt " + std::to_string(req.attempt()) +
                 " (it never ran here, or its runtime directory was cleaned)");
  } else {
    r->set_text(std::move(slice->text));
    r->set_next_offset(slice->next_offset);
  }
  {
    MutexLock lock(&ranks_mu_);
    bool running = false;
    for (const auto& [device, rank] : ranks_) {
      const moe::v1::Assignment& a = rank->assignment;
      running = running || (!rank->done && a.job_id() == req.job_id() &&
                            a.attempt() == req.attempt() && a.rank() == req.rank());
    }
    r->set_ended(!running);
  }
  Write(m);
}

}  // namespace moe::worker
