#include "worker/agent.h"

#include "worker/step_report.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/file_util.h"
#include "common/log.h"
#include "common/yaml.h"

namespace moe::worker {

struct WorkerAgent::Rank {
  moe::v1::Assignment assignment;
  pid_t pid = -1;
  std::unique_ptr<RendezvousProxy> proxy;
  std::string spec_path;
  std::atomic<bool> cancel_requested{false};
  std::atomic<bool> done{false};
  std::string cancel_reason;
};

WorkerAgent::WorkerAgent(AgentOptions options) : o_(std::move(options)) {}

WorkerAgent::~WorkerAgent() {
  Stop();
  for (auto& t : monitors_) if (t.joinable()) t.join();
}

void WorkerAgent::Stop() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

bool WorkerAgent::Write(const moe::v1::WorkerMessage& msg) {
  std::lock_guard<std::mutex> lock(stream_mu_);
  return stream_ && stream_->Write(msg);
}

Status WorkerAgent::Run() {
  MOE_RETURN_IF_ERROR(MakeDirs(o_.runtime_dir));
  double backoff = 0.2;
  std::shared_ptr<moe::v1::WorkerService::Stub> stub;
  while (!stop_) {
    // A fresh channel after a failed connect: a channel remembers its failures and backs off on its
    // own, which would keep a restarted controller waiting for us.
    if (!stub) {
      MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(o_.client));
      stub = std::shared_ptr<moe::v1::WorkerService::Stub>(moe::v1::WorkerService::NewStub(channel));
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!Session(stub)) stub.reset();
    if (stop_) break;
    // A session that lasted is a reconnect after a controller restart: try again soon.
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) backoff = 0.2;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 1.0);  // reconnecting is cheap; a restarted controller waits for us
  }
  StopCurrentRank();
  return OkStatus();
}

bool WorkerAgent::Session(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, o_.client, 0);  // the stream lives as long as the worker; keepalive finds dead peers
  {
    std::lock_guard<std::mutex> lock(stream_mu_);
    stream_ = stub->Connect(&ctx);
    stream_ctx_ = &ctx;
  }
  moe::v1::WorkerMessage reg;
  auto* r = reg.mutable_register_();
  r->set_name(o_.name);
  r->set_rack(o_.rack);
  r->set_node(o_.node);
  r->set_device(o_.device);
  r->set_address(o_.address);
  r->set_version(MOE_VERSION);
  r->set_cpu_cores(static_cast<int>(std::thread::hardware_concurrency()));
  {
    // The machine: its machine-id and host name (containers from one image may share a machine-id,
    // not a host name); workers started with different --node on one host still share its cores.
    std::string h;
    if (auto id = ReadFileToString("/etc/machine-id"); id.ok()) h = *id;
    while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    r->set_host_id(h + "/" + host);
  }
  {
    std::lock_guard<std::mutex> lock(ranks_mu_);
    if (current_ && !current_->done) {
      auto* run = r->add_running();
      run->set_job_id(current_->assignment.job_id());
      run->set_attempt(current_->assignment.attempt());
      run->set_rank(current_->assignment.rank());
    }
    for (const auto& f : unreported_) *r->add_finished() = f;
  }
  if (!Write(reg)) {
    std::lock_guard<std::mutex> lock(stream_mu_);
    const grpc::Status st = stream_->Finish();
    MOE_LOG(WARNING) << "cannot reach the controller at " << o_.client.address << ": " << st.error_message();
    stream_.reset();
    stream_ctx_ = nullptr;
    return false;
  }
  std::atomic<bool> session_over{false};
  std::mutex hb_mu;
  std::condition_variable hb_cv;
  std::thread heartbeat([&] {
    std::unique_lock<std::mutex> lock(hb_mu);
    while (!session_over && !stop_) {
      hb_cv.wait_for(lock, std::chrono::duration<double>(heartbeat_seconds_));
      if (session_over || stop_) break;
      moe::v1::WorkerMessage hb;
      hb.mutable_heartbeat()->set_time(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
      Write(hb);
    }
  });
  moe::v1::ControllerMessage msg;
  while (stream_->Read(&msg)) {
    switch (msg.msg_case()) {
      case moe::v1::ControllerMessage::kRegistered: {
        heartbeat_seconds_ = msg.registered().heartbeat_seconds() > 0 ? msg.registered().heartbeat_seconds() : 1.0;
        MOE_LOG(INFO) << "registered with the controller at " << o_.client.address << " as " << o_.name << " (rack "
                      << o_.rack << ", node " << o_.node << ", " << o_.device << ")";
        std::lock_guard<std::mutex> lock(ranks_mu_);
        unreported_.clear();  // delivered with the registration
        break;
      }
      case moe::v1::ControllerMessage::kAssign:
        StartRank(stub, msg.assign());
        break;
      case moe::v1::ControllerMessage::kCancel:
        CancelRank(msg.cancel().job_id(), msg.cancel().attempt(), msg.cancel().reason());
        break;
      default:
        break;
    }
  }
  session_over = true;
  hb_cv.notify_all();
  heartbeat.join();
  std::lock_guard<std::mutex> lock(stream_mu_);
  const grpc::Status st = stream_->Finish();
  if (!stop_) MOE_LOG(WARNING) << "lost the controller stream (" << st.error_message() << "); reconnecting";
  stream_.reset();
  stream_ctx_ = nullptr;
  return false;  // reconnect on a fresh channel
}

void WorkerAgent::StopCurrentRank() {
  std::shared_ptr<Rank> cur;
  {
    std::lock_guard<std::mutex> lock(ranks_mu_);
    cur = current_;
  }
  if (!cur || cur->done) return;
  cur->cancel_requested = true;
  ::kill(cur->pid, SIGTERM);
  for (int i = 0; i < static_cast<int>(o_.stop_grace_seconds * 10) && !cur->done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!cur->done) ::kill(cur->pid, SIGKILL);
  for (int i = 0; i < 50 && !cur->done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void WorkerAgent::StartRank(const std::shared_ptr<moe::v1::WorkerService::Stub>& stub, const moe::v1::Assignment& a) {
  // One rank at a time: whatever still runs (a stale attempt) stops first.
  StopCurrentRank();
  auto rank = std::make_shared<Rank>();
  rank->assignment = a;
  const std::string tag = a.job_id() + "-a" + std::to_string(a.attempt()) + "-r" + std::to_string(a.rank());
  rank->spec_path = JoinPath(o_.runtime_dir, tag + ".json");
  auto fail = [&](const std::string& why) {
    MOE_LOG(ERROR) << "cannot start rank " << a.rank() << " of " << a.job_id() << ": " << why;
    moe::v1::WorkerMessage m;
    auto* f = m.mutable_finished();
    f->set_job_id(a.job_id());
    f->set_attempt(a.attempt());
    f->set_rank(a.rank());
    f->set_ok(false);
    f->set_exit_code(-1);
    f->set_message("worker " + o_.name + " could not start the rank: " + why);
    if (!Write(m)) {
      std::lock_guard<std::mutex> lock(ranks_mu_);
      unreported_.push_back(m.finished());
    }
  };
  if (Status st = WriteFileAtomic(rank->spec_path, a.spec_json()); !st.ok()) return fail(st.message());
  rank->proxy = std::make_unique<RendezvousProxy>(stub, o_.client, JoinPath(o_.runtime_dir, tag + ".sock"), a.rendezvous_prefix());
  if (Status st = rank->proxy->Start(); !st.ok()) return fail(st.message());
  int report[2], output[2];
  if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(output, O_CLOEXEC) != 0) return fail(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> args = {o_.trainer, "--config", rank->spec_path, "--rank", std::to_string(a.rank()),
                                   "--world-size", std::to_string(a.world_size()), "--rendezvous",
                                   "unix://" + rank->proxy->socket_path(), "--report-fd", "3", "--hostname", o_.address,
                                   "--device", o_.device};  // the rank trains on this worker's device
  if (!a.checkpoint_dir().empty()) {
    args.insert(args.end(), {"--checkpoint-dir", a.checkpoint_dir()});
    if (a.resume()) args.push_back("--resume");
  }
  // Threads: --threads when given, else the controller's share of this node's cores.
  const int threads = o_.threads > 0 ? o_.threads : a.cpu_threads();
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  args.insert(args.end(), o_.extra_trainer_args.begin(), o_.extra_trainer_args.end());
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return fail(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The rank dies with its agent: a killed worker takes its rank along, as a lost node would.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(report[1], 3);
    ::dup2(output[1], 1);
    ::dup2(output[1], 2);
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(o_.trainer.c_str(), argv.data());
    std::fprintf(stderr, "exec %s: %s\n", o_.trainer.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(report[1]);
  ::close(output[1]);
  rank->pid = pid;
  {
    std::lock_guard<std::mutex> lock(ranks_mu_);
    current_ = rank;
  }
  MOE_LOG(INFO) << "started rank " << a.rank() << "/" << a.world_size() << " of " << a.job_id() << " attempt " << a.attempt()
                << " (pid " << pid << ")";
  moe::v1::WorkerMessage started;
  started.mutable_started()->set_job_id(a.job_id());
  started.mutable_started()->set_attempt(a.attempt());
  started.mutable_started()->set_rank(a.rank());
  Write(started);
  const int report_fd = report[0], output_fd = output[0];
  monitors_.emplace_back([this, rank, report_fd, output_fd] {
    // Reads the rank's step reports and output until both pipes close, then reaps it.
    std::string report_buf, output_buf, last_error, last_line;
    const std::string prefix = "[" + rank->assignment.job_id() + " r" + std::to_string(rank->assignment.rank()) + "] ";
    pollfd fds[2] = {{report_fd, POLLIN, 0}, {output_fd, POLLIN, 0}};
    int open = 2;
    char buf[8192];
    while (open > 0) {
      if (::poll(fds, 2, 1000) < 0 && errno != EINTR) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
          continue;
        }
        std::string& acc = i == 0 ? report_buf : output_buf;
        acc.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = acc.find('\n')) != std::string::npos) {
          const std::string line = acc.substr(0, nl);
          acc.erase(0, nl + 1);
          if (i == 1) {
            std::fprintf(stderr, "%s%s\n", prefix.c_str(), line.c_str());
            if (!line.empty()) last_line = line;
            if (line.find("training failed") != std::string::npos || line.rfind("moe-train: ", 0) == 0) last_error = line;
            continue;
          }
          moe::v1::WorkerMessage m;
          auto* s = m.mutable_step();
          if (!StepMetricsFromJson(line, s->mutable_metrics()).ok()) continue;
          s->set_job_id(rank->assignment.job_id());
          s->set_attempt(rank->assignment.attempt());
          s->set_rank(rank->assignment.rank());
          Write(m);
        }
      }
    }
    int status = 0;
    ::waitpid(rank->pid, &status, 0);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    moe::v1::WorkerMessage m;
    auto* f = m.mutable_finished();
    f->set_job_id(rank->assignment.job_id());
    f->set_attempt(rank->assignment.attempt());
    f->set_rank(rank->assignment.rank());
    f->set_ok(ok);
    f->set_cancelled(rank->cancel_requested);
    f->set_exit_code(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
    std::string why = last_error.empty() ? last_line : last_error;
    if (WIFSIGNALED(status)) why = std::string("killed by signal ") + strsignal(WTERMSIG(status)) + (why.empty() ? "" : "; last output: " + why);
    if (!ok) f->set_message(why);
    rank->proxy->Stop();
    ::unlink(rank->spec_path.c_str());
    rank->done = true;
    MOE_LOG(INFO) << "rank " << rank->assignment.rank() << " of " << rank->assignment.job_id() << " attempt "
                  << rank->assignment.attempt() << (ok ? " finished" : (rank->cancel_requested ? " stopped" : " failed: " + why));
    if (!Write(m)) {
      std::lock_guard<std::mutex> lock(ranks_mu_);
      unreported_.push_back(*f);
    }
  });
}

void WorkerAgent::CancelRank(const std::string& job_id, int attempt, const std::string& reason) {
  std::shared_ptr<Rank> cur;
  {
    std::lock_guard<std::mutex> lock(ranks_mu_);
    cur = current_;
  }
  if (!cur || cur->done || cur->assignment.job_id() != job_id || cur->assignment.attempt() != attempt) return;
  MOE_LOG(INFO) << "stopping rank " << cur->assignment.rank() << " of " << job_id << ": " << reason;
  cur->cancel_requested = true;
  ::kill(cur->pid, SIGTERM);
  // If it does not stop at a step boundary in time, it is killed.
  const double grace = o_.stop_grace_seconds;
  std::thread([cur, grace] {
    for (int i = 0; i < static_cast<int>(grace * 10) && !cur->done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!cur->done) ::kill(cur->pid, SIGKILL);
  }).detach();
}

}  // namespace moe::worker
