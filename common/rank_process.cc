#include "common/rank_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace moe {
namespace {

constexpr int kReport = 0, kOutput = 1;
constexpr int kChildReportFd = 3;

// What the child needs, built before the fork: no allocation happens after it.
struct ChildPlan {
  std::vector<std::string> storage;
  std::vector<char*> argv;
  int report_write = -1, output_write = -1;
  bool die_with_parent = true;
  pid_t parent = 0;
};

// Moves `fd` onto `target` for exec: dup2, or clear close-on-exec when it already is `target`.
// Async-signal-safe.
void MoveFd(int fd, int target) {
  if (fd == target) {
    ::fcntl(fd, F_SETFD, 0);
  } else {
    ::dup2(fd, target);
  }
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(const ChildPlan& plan) {
  if (plan.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != plan.parent) ::_exit(127);  // the parent died before prctl took effect
  }
  // Output first: a report pipe that happens to be fd 1 or 2 must not be overwritten later.
  if (plan.report_write >= 0 && plan.report_write != kChildReportFd) {
    MoveFd(plan.report_write, kChildReportFd);
  } else if (plan.report_write == kChildReportFd) {
    MoveFd(kChildReportFd, kChildReportFd);
  }
  if (plan.output_write >= 0) {
    MoveFd(plan.output_write, 1);
    MoveFd(plan.output_write, 2);
  }
  ::execv(plan.argv[0], plan.argv.data());
  static const char kMsg[] = "rank_process: exec failed\n";
  ssize_t ignored = ::write(2, kMsg, sizeof(kMsg) - 1);
  (void)ignored;  // nothing more can be done in the child
  ::_exit(127);
}

Status MakePipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  return OkStatus();
}

}  // namespace

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool RankExit::exited() const { return WIFEXITED(wait_status); }

int RankExit::exit_code() const {
  return exited() ? WEXITSTATUS(wait_status) : -WTERMSIG(wait_status);
}

std::string RankExit::Describe() const {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(wait_status);
}

RankEnd RankExit::Outcome() const {
  if (record) return *record;
  RankEnd end;
  if (exited() && exit_code() == kExitOk) return end;
  // No record, but the "stopped" code: it stopped on request before it could write one (a stop in
  // initialisation, or in a step that did not end in time).
  if (exited() && exit_code() == kExitStopped)
    return StoppedRankEnd(Describe() + ": stopped on request");
  // No record: it crashed or was killed before it could say why. A retry may work.
  end.code = StatusCode::kUnavailable;
  end.failure_class = FailureClass::kTransient;
  end.message = Describe() + (last_output.empty() ? "" : "; last output: " + last_output);
  return end;
}

StatusOr<std::unique_ptr<RankProcess>> RankProcess::Start(const RankCommand& command) {
  if (command.program.empty()) return InvalidArgumentError("rank process: no program");
  int report[2] = {-1, -1}, output[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {report[0], report[1], output[0], output[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (command.report_stream) MOE_RETURN_IF_ERROR(MakePipe(report));
  if (command.capture_output) {
    if (Status st = MakePipe(output); !st.ok()) {
      close_all();
      return st;
    }
  }
  ChildPlan plan;
  plan.storage.push_back(command.program);
  plan.storage.insert(plan.storage.end(), command.args.begin(), command.args.end());
  for (auto& s : plan.storage) plan.argv.push_back(s.data());
  plan.argv.push_back(nullptr);
  plan.report_write = report[1];
  plan.output_write = output[1];
  plan.die_with_parent = command.die_with_parent;
  plan.parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_all();
    return ErrnoError("fork", err);
  }
  if (pid == 0) ExecChild(plan);
  for (int fd : {report[1], output[1]}) {
    if (fd >= 0) ::close(fd);
  }
  std::unique_ptr<RankProcess> p(new RankProcess());
  p->pid_ = pid;
  p->fds_[kReport] = report[0];
  p->fds_[kOutput] = output[0];
  return p;
}

RankProcess::~RankProcess() {
  if (!ended_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  CloseFd(kReport);
  CloseFd(kOutput);
}

void RankProcess::CloseFd(int index) {
  if (fds_[index] >= 0) ::close(fds_[index]);
  fds_[index] = -1;
}

void RankProcess::HandleLine(bool report, const std::string& line, const LineFn& on_report,
                             const LineFn& on_output) {
  if (!report) {
    if (!line.empty()) exit_.last_output = line;
    if (on_output) on_output(line);
    return;
  }
  if (line.rfind("{\"end\":", 0) == 0) {
    if (auto doc = ParseYaml(line); doc.ok()) {
      if (auto end = ParseRankEnd(*doc); end.ok()) {
        exit_.record = *end;
        return;
      }
    }
  }
  if (on_report) on_report(line);
}

bool RankProcess::Pump(double timeout_seconds, const LineFn& on_report, const LineFn& on_output) {
  if (term_pending_.exchange(false)) Signal(SIGTERM);
  const double kill_at = kill_at_.load();
  if (kill_at > 0 && MonotonicSeconds() >= kill_at) {
    Signal(SIGKILL);
    kill_at_ = 0;
  }
  pollfd fds[2] = {{fds_[kReport], POLLIN, 0}, {fds_[kOutput], POLLIN, 0}};
  if (fds_[kReport] < 0 && fds_[kOutput] < 0) return false;
  const int ms = static_cast<int>(timeout_seconds * 1000);
  if (::poll(fds, 2, ms) < 0) return errno == EINTR;
  char buf[8192];
  for (int i = 0; i < 2; ++i) {
    if (fds_[i] < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = ::read(fds_[i], buf, sizeof(buf));
    if (n <= 0) {
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (!partial_[i].empty()) HandleLine(i == kReport, partial_[i], on_report, on_output);
      partial_[i].clear();
      CloseFd(i);
      continue;
    }
    std::string& acc = partial_[i];
    acc.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = acc.find('\n', start)) != std::string::npos) {
      HandleLine(i == kReport, acc.substr(start, nl - start), on_report, on_output);
      start = nl + 1;
    }
    acc.erase(0, start);
  }
  return fds_[kReport] >= 0 || fds_[kOutput] >= 0;
}

bool RankProcess::Reap() {
  if (ended_) return true;
  if (fds_[kReport] >= 0 || fds_[kOutput] >= 0) return false;  // still talking: Pump first
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0) return false;
  exit_.wait_status = r == pid_ ? status : 0;
  ended_ = true;
  return true;
}

RankExit RankProcess::Wait(const LineFn& on_report, const LineFn& on_output) {
  while (Pump(0.1, on_report, on_output)) {
  }
  while (!Reap()) {
    Pump(0, nullptr, nullptr);  // enforces a pending kill deadline
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_;
}

void RankProcess::RequestStop(double grace_seconds) {
  stop_requested_ = true;
  term_pending_ = true;
  KillAt(MonotonicSeconds() + grace_seconds);
}

void RankProcess::KillAt(double monotonic_seconds) {
  double current = kill_at_.load();
  while ((current == 0 || monotonic_seconds < current) &&
         !kill_at_.compare_exchange_weak(current, monotonic_seconds)) {
  }
}

void RankProcess::Signal(int sig) {
  if (!ended_ && pid_ > 0) ::kill(pid_, sig);
}

}  // namespace moe
