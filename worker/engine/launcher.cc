#include "worker/engine/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/file_util.h"

namespace moe {
namespace {

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with status " + std::to_string(status);
}

}  // namespace

int LaunchLocalRanks(const LaunchOptions& o) {
  char tmpl[] = "/tmp/moe-rendezvous.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("moe-train: mkdtemp");
    return 1;
  }
  const std::string rdzv = tmpl;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads_per_rank > 0 ? o.threads_per_rank : std::max(1, hw / o.nproc);
  std::fprintf(stderr, "moe-train: launching %d ranks (%d threads each), rendezvous file://%s\n", o.nproc, threads, rdzv.c_str());
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nproc; ++r) {
    std::vector<std::string> args = {o.program};
    args.insert(args.end(), o.args.begin(), o.args.end());
    for (const std::string& a : {std::string("--rank"), std::to_string(r), std::string("--world-size"), std::to_string(o.nproc),
                                 std::string("--rendezvous"), "file://" + rdzv, std::string("--threads"), std::to_string(threads)}) {
      args.push_back(a);
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("moe-train: fork");
      return 1;
    }
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(o.program.c_str(), argv.data());
      std::perror("moe-train: exec");
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  bool failed = false;
  auto failed_at = std::chrono::steady_clock::time_point::max();
  bool killed = false;
  while (remaining > 0) {
    if (g_signal != 0) {
      for (size_t i = 0; i < pids.size(); ++i) if (!done[i]) ::kill(pids[i], g_signal);
      g_signal = 0;
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid) continue;
        done[i] = true;
        status[i] = st;
        --remaining;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
          if (!failed) failed_at = std::chrono::steady_clock::now();
          failed = true;
          std::fprintf(stderr, "moe-train: rank %zu %s\n", i, Describe(st).c_str());
        }
      }
      continue;
    }
    // Ranks fail on their own within the job's collective timeout; this is only a safety net.
    if (failed && !killed && std::chrono::steady_clock::now() - failed_at > std::chrono::duration<double>(o.grace_seconds)) {
      std::fprintf(stderr, "moe-train: ranks still running %.0f s after a failure; killing them\n", o.grace_seconds);
      for (size_t i = 0; i < pids.size(); ++i) if (!done[i]) ::kill(pids[i], SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  (void)RemoveAll(rdzv);
  if (!failed) return 0;
  std::fprintf(stderr, "moe-train: the job failed:");
  for (size_t i = 0; i < pids.size(); ++i) std::fprintf(stderr, " rank %zu %s;", i, Describe(status[i]).c_str());
  std::fprintf(stderr, "\n");
  // When every rank that failed said the same thing (2 bad flags or job, 3 stopped on request, 4 the job
  // cannot run here), the launcher says it too; anything else is a failure a retry may fix (1).
  int common = -1;
  for (size_t i = 0; i < pids.size(); ++i) {
    const int st = status[i];
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    common = common == -1 || common == code ? code : 1;
  }
  return common >= 2 && common <= 4 ? common : 1;
}

}  // namespace moe
