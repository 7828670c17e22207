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
#include "worker/agent/step_report.h"

namespace moe::worker {

struct WorkerAgent::Rank {
  moe::v1::Assignment assignment;
  int device = 0;    // its place in AgentOptions::devices
  std::string name;  // the worker (device) it runs on, as the controller calls it
  std::string tag;   // <job>-a<attempt>-r<rank>: file names and log prefix
  std::unique_ptr<RankProcess> process;
  std::unique_ptr<RendezvousProxy> proxy;
  std::string spec_path;
  std::atomic<bool> done{false};
  std::atomic<bool> fake_stop{false};  // fake mode: asked to stop (no process to signal)
  std::thread monitor;
  std::unique_ptr<RankLogWriter> log;  // its output, for moectl logs
};

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
  {
    MutexLock lock(&ranks_mu_);
    if (leaving_) return;
    leave_reason_ = reason;
    leaving_ = true;
  }
  MOE_LOG(INFO) << "leaving (" << reason
                << "): the rank checkpoints at its next step boundary and stops";
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
  if (o_.devices.front() != "cpu" || o_.threads <= 0 || o_.fake_step_seconds > 0) return;
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

namespace {

// The controller's "retry after N ms" in a refused registration's message, in seconds (0: none).
double RetryHintSeconds(const std::string& message) {
  const size_t at = message.find("retry after ");
  if (at == std::string::npos) return 0;
  const double ms = std::atof(message.c_str() + at + 12);
  return ms > 0 && ms < 600000 ? ms / 1000.0 : 0;
}

}  // namespace

Status WorkerAgent::Run() {
  MOE_RETURN_IF_ERROR(MakeDirs(o_.runtime_dir));
  MeasurePeakAhead();
  double backoff = 0.2;
  std::mt19937 rng(std::random_device{}());
  std::shared_ptr<moe::v1::WorkerService::Stub> stub;
  while (!stop_) {
    // A fresh channel after a failed connect: a channel remembers its failures and backs off on its
    // own, which would keep a restarted controller waiting for us. Not for agents that share
    // connections (fake nodes, --fake-agents-per-connection): their new channel would be the same
    // pooled connection again, and 16,384 agents building channels each second after a restart kept
    // the fakes' one core busy (bench/load.py's restart: all back in 32 s before, 23 s after).
    if (!stub) {
      MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(o_.client));
      stub =
          std::shared_ptr<moe::v1::WorkerService::Stub>(moe::v1::WorkerService::NewStub(channel));
    }
    if (!Credential(*stub)) {
      if (stop_) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff * 5));
      backoff = std::min(backoff * 2, 6.0);  // a held node credential: every 30 s at most
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!Session(stub) && o_.client.connection_group < 0) stub.reset();
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
      MOE_LOG(WARNING) << "cannot reach the controller at " << o_.client.address << ": "
                       << st.error_message() << " (try " << unreachable_
                       << " since it was last reached; retrying, logged every 30 s)";
      unreachable_logged_ = now;
    }
    stream_.reset();
    stream_ctx_ = nullptr;
    return false;
  }
  if (unreachable_ > 1)
    MOE_LOG(INFO) << "reached the controller at " << o_.client.address << " after " << unreachable_
                  << " failed tries";
  unreachable_ = 0;
  // Heartbeats from the process's one ticker thread, or its group's
  // (worker/agent/heartbeat_ticker.h).
  // A beat the UDP path does not carry goes on the stream, from the ticker's slow lane: a write
  // that blocks must not hold up the UDP beats of the ticker's other agents. None before the
  // registration's answer: no lease runs yet, and the controller reads the stream's next message
  // only once it has answered (16,384 agents waiting in a herd sent 1,500 such beats a second).
  HeartbeatTicker& ticker = HeartbeatTicker::Group(o_.beat_group);
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
  const std::string host = UdpHostOf(o_.client.address);
  if (host.empty()) return;
  udp_link_ = UdpBeatLink::For(host, static_cast<int>(r.heartbeat_udp_port()), o_.beat_group);
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
  int64_t seen = max_epoch_.load();
  while (epoch > seen && !max_epoch_.compare_exchange_weak(seen, epoch)) {
  }
  if (epoch >= seen) return true;
  MOE_LOG(ERROR) << "refusing " << what << " from a controller of epoch " << epoch << ": epoch "
                 << seen
                 << " was seen already (a newer controller holds the state; this one is stale)";
  return false;
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
        MOE_LOG(INFO) << "registered with the controller at " << o_.client.address << " as "
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

void WorkerAgent::StopRanks(int device) {
  MutexLock stopping(&stop_rank_mu_);
  std::vector<std::shared_ptr<Rank>> stopping_ranks;
  {
    MutexLock lock(&ranks_mu_);
    for (const auto& [d, rank] : ranks_) {
      if (device < 0 || d == device) stopping_ranks.push_back(rank);
    }
  }
  for (const auto& r : stopping_ranks) {  // all told first: they checkpoint side by side
    if (r->done) continue;
    if (r->process) r->process->RequestStop(o_.stop_grace_seconds);
    r->fake_stop = true;
  }
  for (const auto& r : stopping_ranks) {
    if (r->monitor.joinable()) r->monitor.join();
  }
}

// Sends a rank's outcome now, or keeps it for the next registration.
void WorkerAgent::Report(const moe::v1::RankFinished& f) {
  moe::v1::WorkerMessage m;
  *m.mutable_finished() = f;
  if (Write(m)) return;
  MutexLock lock(&ranks_mu_);
  unreported_.push_back(f);
}

// The job's data and checkpoint paths against this worker's roots, symbolic links resolved here: no
// control character; relative paths below the first root; the dataset's own files (.bin, .idx), not
// only its prefix, below a data root. The rank opens them again beneath the roots (moe-train
// --data-root, --checkpoint-root), so what it reads and writes is what this check saw.
Status WorkerAgent::CheckPaths(const moe::v1::Assignment& a) const {
  const moe::v1::JobSpec& spec = a.spec().spec();
  MOE_RETURN_IF_ERROR(CheckPathText("spec.data.path", spec.data().path()));
  MOE_RETURN_IF_ERROR(CheckPathText("spec.checkpoint.dir", spec.checkpoint().dir()));
  if (spec.data().source() != "synthetic") {
    for (const char* file : {".bin", ".idx"}) {
      MOE_RETURN_IF_ERROR(CheckUnderRoots("spec.data.path", spec.data().path() + file,
                                          o_.data_roots, "data", true, o_.data_roots.front()));
    }
  }
  if (spec.checkpoint().dir().empty()) return OkStatus();
  const std::vector<std::string> roots = CheckpointRoots();
  return CheckUnderRoots("spec.checkpoint.dir", spec.checkpoint().dir(), roots, "checkpoint", true,
                         roots.front());
}

std::vector<std::string> WorkerAgent::CheckpointRoots() const {
  std::vector<std::string> roots = o_.checkpoint_roots;
  MutexLock lock(&roots_mu_);
  if (!controller_checkpoint_root_.empty()) roots.push_back(controller_checkpoint_root_);
  return roots;
}

// Why `root` cannot serve as a checkpoint root here, or "" when it can.
static std::string UnusableRoot(const std::string& root) {
  if (Status st = CheckPathText("checkpoint root", root); !st.ok()) return st.message();
  if (root.empty() || root[0] != '/') return "not an absolute path";
  if (root == "/") return "/ would let a job write anywhere (only an explicit --checkpoint-root /)";
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return std::string("not here: ") + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (::access(root.c_str(), W_OK | X_OK) != 0) return "not writable by this worker";
  return "";
}

void WorkerAgent::AcceptCheckpointRoot(const std::string& root) {
  if (!o_.default_checkpoint_roots) return;
  if (root.empty()) {  // this controller offers none: one taken from an earlier controller goes
    MutexLock lock(&roots_mu_);
    controller_checkpoint_root_.clear();
    return;
  }
  const std::string why = UnusableRoot(root);
  bool same = false;  // a reconnect: logged before (the answer goes with every registration)
  {
    MutexLock lock(&roots_mu_);
    same = controller_checkpoint_root_ == (why.empty() ? root : "") && registrations_ > 0;
    controller_checkpoint_root_ = why.empty() ? root : "";
  }
  if (!same && why.empty()) {
    MOE_LOG(INFO) << "the controller's checkpoint root " << root
                  << " is mounted here: jobs that name no checkpoint directory write there";
  } else if (!same) {
    MOE_LOG(WARNING) << "the controller's checkpoint root " << root << " is not usable here ("
                     << why << "): jobs that name no checkpoint directory will not run here; "
                     << "give --checkpoint-root a directory this worker and the controller share";
  }
  moe::v1::WorkerMessage m;
  auto* r = m.mutable_checkpoint_root_mounted();
  r->set_root(root);
  r->set_ok(why.empty());
  r->set_why(why);
  Write(m);
}

Status WorkerAgent::ResolveDataPath(moe::v1::Assignment* a) const {
  moe::v1::DataSpec& data = *a->mutable_spec()->mutable_spec()->mutable_data();
  if (data.source() == "synthetic" || data.path().empty()) return OkStatus();
  MOE_RETURN_IF_ERROR(CheckPathText("spec.data.path", data.path()));
  char cwd[4096];
  const std::string here = ::getcwd(cwd, sizeof(cwd)) ? cwd : "";
  const std::string found =
      ResolveRelativeData(data.path(), o_.data_roots, here,
                          [](const std::string& p) { return PathExists(p + ".idx"); });
  // Nowhere here: left as it is, for CheckPaths (a path outside the roots is refused there) and for
  // the rank, which fails permanently on a dataset it cannot open, naming it.
  if (!found.empty()) data.set_path(found);
  return OkStatus();
}

StatusOr<std::vector<std::string>> WorkerAgent::RankArgs(const Rank& rank) const {
  const moe::v1::Assignment& a = rank.assignment;
  std::vector<std::string> args = {
      "--config",     rank.spec_path,
      "--rank",       std::to_string(a.rank()),
      "--rendezvous", "unix://" + rank.proxy->socket_path(),
      "--report-fd",  "3",
      "--hostname",   o_.address,
      "--device",     o_.devices[static_cast<size_t>(rank.device)]};  // the assignment's device
  if (a.resume() && !a.spec().spec().checkpoint().dir().empty()) args.push_back("--resume");
  // Where the rank may read and write (it opens its paths beneath these), and who it runs for (its
  // lead rank claims the checkpoint directory: one job per directory, the newest attempt only).
  for (const auto& r : o_.data_roots) args.insert(args.end(), {"--data-root", r});
  for (const auto& r : CheckpointRoots()) args.insert(args.end(), {"--checkpoint-root", r});
  args.insert(args.end(), {"--job-id", a.job_id(), "--job-name", a.spec().metadata().name(),
                           "--job-owner", a.owner(), "--epoch", std::to_string(a.epoch()),
                           "--attempt", std::to_string(a.attempt())});
  // Threads: --threads when given, else the controller's share of this node's cores.
  const int threads = o_.threads > 0 ? o_.threads : a.cpu_threads();
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  // The CPU peak MFU is measured against: once per thread count on this worker, not in every rank's
  // start-up (half a second of SGEMM each).
  if (o_.devices[static_cast<size_t>(rank.device)] == "cpu")
    args.insert(args.end(), {"--peak-cache", PeakCachePath(threads)});
  args.insert(args.end(), o_.extra_trainer_args.begin(), o_.extra_trainer_args.end());
  return args;
}

namespace {

moe::v1::FailureClass ToProto(FailureClass c) {
  switch (c) {
    case FailureClass::kNone:
      return moe::v1::FAILURE_NONE;
    case FailureClass::kStopped:
      return moe::v1::FAILURE_STOPPED;
    case FailureClass::kPermanent:
      return moe::v1::FAILURE_PERMANENT;
    case FailureClass::kTransient:
      break;
  }
  return moe::v1::FAILURE_TRANSIENT;
}

// How the assigned rank ended: its outcome (the rank's final record, or what the agent knows), with
// the exit code it had (-1: it never ran).
moe::v1::RankFinished Finished(const moe::v1::Assignment& a, const RankEnd& end, int exit_code,
                               bool cancelled) {
  moe::v1::RankFinished f;
  f.set_job_id(a.job_id());
  f.set_attempt(a.attempt());
  f.set_rank(a.rank());
  f.set_ok(end.ok());
  f.set_cancelled(cancelled);
  f.set_exit_code(exit_code);
  f.set_failure_class(ToProto(end.failure_class));
  f.set_status_code(std::string(StatusCodeName(end.code)));
  f.set_checkpoint_step(end.checkpoint_step);
  if (!end.ok()) f.set_message(end.message);
  return f;
}

// A rank this agent did not run: `cls` says whether the job may run elsewhere (transient) or not at
// all.
moe::v1::RankFinished NotRun(const moe::v1::Assignment& a, FailureClass cls, StatusCode code,
                             std::string message) {
  RankEnd end;
  end.failure_class = cls;
  end.code = code;
  end.message = std::move(message);
  return Finished(a, end, cls == FailureClass::kPermanent ? kExitCannotRun : -1, false);
}

// The rendezvous socket of a rank: named by a hash of its tag, so that a long job name cannot push
// the path past sun_path's 108 bytes (main checks the runtime directory leaves room for it).
std::string SocketName(const std::string& tag) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : tag) h = (h ^ c) * 1099511628211ull;
  char name[32];
  std::snprintf(name, sizeof(name), "rv-%016llx.sock", static_cast<unsigned long long>(h));
  return name;
}

moe::v1::WorkerMessage AboutRank(const moe::v1::Assignment& a, bool started) {
  moe::v1::WorkerMessage m;
  if (started) {
    m.mutable_started()->set_job_id(a.job_id());
    m.mutable_started()->set_attempt(a.attempt());
    m.mutable_started()->set_rank(a.rank());
  } else {
    m.mutable_step()->set_job_id(a.job_id());
    m.mutable_step()->set_attempt(a.attempt());
    m.mutable_step()->set_rank(a.rank());
  }
  return m;
}

}  // namespace

void WorkerAgent::StartRank(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub,
                            moe::v1::Assignment a) {
  const int device = a.device_index();
  if (device < 0 || device >= static_cast<int>(o_.devices.size())) {
    return Report(NotRun(a, FailureClass::kTransient, StatusCode::kInvalidArgument,
                         "worker " + o_.name + " has no device " + std::to_string(device) +
                             " (it serves " + std::to_string(o_.devices.size()) + ")"));
  }
  // One rank at a time on a device: whatever still runs there (a stale attempt) stops first.
  StopRanks(device);
  if (leaving_) {  // assigned before the controller heard it: refuse, as a worker that could not
                   // start it
    return Report(NotRun(a, FailureClass::kTransient, StatusCode::kUnavailable,
                         "worker " + o_.name + " is leaving (" + LeaveReason() + ")"));
  }
  Status st = o_.fake_step_seconds > 0 ? OkStatus() : ResolveDataPath(&a);  // a fake reads none
  if (st.ok()) st = CheckPaths(a);
  if (!st.ok()) {  // the job cannot run here as specified: it fails at once
    MOE_LOG(ERROR) << "refusing rank " << a.rank() << " of " << a.job_id() << ": " << st.message();
    return Report(NotRun(a, FailureClass::kPermanent, StatusCode::kFailedPrecondition,
                         "worker " + o_.name + " refused the rank: " + st.message()));
  }
  auto rank = std::make_shared<Rank>();
  rank->assignment = a;
  rank->device = device;
  rank->name = a.worker().empty() ? o_.name : a.worker();
  rank->tag = a.job_id() + "-a" + std::to_string(a.attempt()) + "-r" + std::to_string(a.rank());
  if (o_.fake_step_seconds > 0) return Adopt(rank, &WorkerAgent::FakeMonitor);
  rank->spec_path = JoinPath(o_.runtime_dir, rank->tag + ".json");
  auto start = [&]() -> Status {
    // The typed spec becomes the rank's document here, at the process boundary (moe-train reads
    // it).
    MOE_RETURN_IF_ERROR(WriteFileAtomic(rank->spec_path, ToJson(MessageToNode(a.spec()))));
    rank->proxy = std::make_unique<RendezvousProxy>(stub, o_.client,
                                                    JoinPath(o_.runtime_dir, SocketName(rank->tag)),
                                                    a.rendezvous_prefix(), session_);
    MOE_RETURN_IF_ERROR(rank->proxy->Start());
    RankCommand cmd;
    cmd.program = o_.trainer;
    MOE_ASSIGN_OR_RETURN(cmd.args, RankArgs(*rank));
    MOE_ASSIGN_OR_RETURN(rank->process, RankProcess::Start(cmd));
    return OkStatus();
  };
  if (Status st = start(); !st.ok()) {
    MOE_LOG(ERROR) << "cannot start rank " << a.rank() << " of " << a.job_id() << ": " << st;
    if (rank->proxy) rank->proxy->Stop();
    // This worker failed, not the job: a transient failure.
    return Report(NotRun(a, FailureClass::kTransient, st.code(),
                         "worker " + o_.name + " could not start the rank: " + st.message()));
  }
  MOE_LOG(INFO) << "started rank " << a.rank() << "/" << a.spec().spec().parallelism().world_size()
                << " of " << a.job_id() << " attempt " << a.attempt() << " (pid "
                << rank->process->pid() << ")";
  Adopt(rank, &WorkerAgent::Monitor);
}

// The rank is this worker's now: the controller hears it started, and `monitor` watches it on its
// own thread until it ends.
AgentState WorkerAgent::State() {
  AgentState s;
  s.registered = registered_;
  s.leaving = leaving_;
  s.devices = static_cast<int>(o_.devices.size());
  s.registrations = registrations_;
  s.ranks_started = ranks_started_;
  MutexLock lock(&ranks_mu_);
  for (const auto& [device, rank] : ranks_) s.ranks_running += rank && !rank->done;
  return s;
}

void WorkerAgent::Adopt(const std::shared_ptr<Rank>& rank, void (WorkerAgent::*monitor)(Rank*)) {
  ++ranks_started_;
  Write(AboutRank(rank->assignment, /*started=*/true));
  {
    MutexLock lock(&ranks_mu_);
    ranks_[rank->device] = rank;
  }
  rank->monitor = std::thread([this, r = rank.get(), monitor] { (this->*monitor)(r); });
}

// Streams the rank's step reports to the controller and its output to this agent's log until it
// ends, then reports how it ended (its final record, or its exit status when it sent none).
void WorkerAgent::Monitor(Rank* rank) {
  const moe::v1::Assignment& a = rank->assignment;
  auto on_report = [&](const std::string& line) {
    moe::v1::WorkerMessage m = AboutRank(a, /*started=*/false);
    if (StepMetricsFromJson(line, m.mutable_step()->mutable_metrics()).ok()) Write(m);
  };
  rank->log = std::make_unique<RankLogWriter>(
      RankLogPath(o_.runtime_dir, a.job_id(), a.attempt(), a.rank()));
  // The agent's own lines bracket the rank's output, so every rank's log says where and when it ran
  // and how it ended, even a rank that printed nothing (only rank 0 prints its steps).
  rank->log->Append("moe-worker: rank " + std::to_string(a.rank()) + " of " + a.job_id() +
                    " attempt " + std::to_string(a.attempt()) + " started on " + rank->name + " (" +
                    o_.devices[static_cast<size_t>(rank->device)] + ", node " + o_.node + ", pid " +
                    std::to_string(rank->process->pid()) + ")");
  auto on_output = [&](const std::string& line) {
    LogRankLine(a.job_id(), a.rank(), line);
    rank->log->Append(line);
  };
  while (rank->process->Pump(0.2, on_report, on_output)) {
  }
  const RankExit exit = rank->process->Wait();
  const RankEnd end = exit.Outcome();
  rank->proxy->Stop();
  ::unlink(rank->spec_path.c_str());
  const std::string how =
      end.ok() ? " finished"
               : (rank->process->stop_requested() ? " stopped" : " failed: " + end.message);
  rank->log->Append("moe-worker: rank " + std::to_string(a.rank()) + how + " (exit code " +
                    std::to_string(exit.exit_code()) + ")");
  rank->done = true;
  MOE_LOG(INFO) << "rank " << a.rank() << " of " << a.job_id() << " attempt " << a.attempt() << how;
  Report(Finished(a, end, exit.exit_code(), rank->process->stop_requested()));
}

// Fake mode: the rank is a thread of this agent; the controller sees what a rank would send.
void WorkerAgent::FakeMonitor(Rank* rank) {
  const moe::v1::Assignment& a = rank->assignment;
  const int64_t steps = a.spec().spec().training().steps();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= steps && !rank->fake_stop && !stop_; ++step) {
    const auto due =
        t0 + std::chrono::duration<double>(o_.fake_step_seconds * static_cast<double>(step));
    while (std::chrono::steady_clock::now() < due && !rank->fake_stop && !stop_) {
      std::this_thread::sleep_for(
          std::min(std::chrono::duration<double>(0.05),
                   std::chrono::duration<double>(due - std::chrono::steady_clock::now())));
    }
    if (rank->fake_stop || stop_)
      continue;  // every rank reports, as the trainer's do (the controller merges them)
    moe::v1::WorkerMessage m = AboutRank(a, /*started=*/false);
    auto* mt = m.mutable_step()->mutable_metrics();
    mt->set_step(step);
    mt->set_total_steps(steps);
    mt->set_loss(10.0 / (1.0 + 0.01 * static_cast<double>(step)));
    mt->set_step_seconds(o_.fake_step_seconds);
    const auto& data = a.spec().spec().data();
    const int64_t tokens = data.global_batch_size() * data.seq_length();  // one global batch
    mt->set_tokens_per_second(static_cast<double>(tokens) / o_.fake_step_seconds);
    mt->set_tokens(tokens);
    Write(m);
  }
  const bool stopped = rank->fake_stop || stop_;
  RankEnd end = stopped ? StoppedRankEnd("stopped (fake rank)") : RankEnd{};
  if (!stopped) end.checkpoint_step = steps;  // a trainer's success ends with its final checkpoint
  rank->done = true;
  Report(Finished(a, end, end.exit_code(), stopped));
}

void WorkerAgent::CancelRank(const std::string& job_id, int attempt, const std::string& reason,
                             bool now) {
  std::vector<std::shared_ptr<Rank>> of_attempt;
  {
    MutexLock lock(&ranks_mu_);
    for (const auto& [device, rank] : ranks_) {
      if (!rank->done && rank->assignment.job_id() == job_id &&
          rank->assignment.attempt() == attempt)
        of_attempt.push_back(rank);
    }
  }
  for (const auto& cur : of_attempt) {
    // Told already: the controller sends a cancel per rank of the attempt, and this agent may run
    // several of them; only --now says more.
    if (cur->fake_stop && !now) continue;
    MOE_LOG(INFO) << (now ? "killing rank " : "stopping rank ") << cur->assignment.rank() << " of "
                  << job_id << " on " << cur->name << ": " << reason;
    // It stops at its next step boundary; if not within the grace, its monitor kills it.
    if (cur->process) cur->process->RequestStop(now ? 0 : o_.stop_grace_seconds);
    cur->fake_stop = true;
  }
}

}  // namespace moe::worker
