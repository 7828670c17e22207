#include "worker/engine/train/launcher.h"

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/file_util.h"
#include "common/rank_process.h"

namespace moe::train {
namespace {

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct LocalRank {
  std::unique_ptr<RankProcess> process;
  bool done = false;
};

StatusOr<std::vector<LocalRank>> StartRanks(const LaunchOptions& o, const std::string& rdzv,
                                            int threads) {
  std::vector<LocalRank> ranks;
  for (int r = 0; r < o.nproc; ++r) {
    RankCommand cmd;
    cmd.program = o.program;
    cmd.args = o.args;
    cmd.args.insert(cmd.args.end(), {"--rank", std::to_string(r), "--world-size",
                                     std::to_string(o.nproc), "--rendezvous", "file://" + rdzv,
                                     "--threads", std::to_string(threads), "--report-fd", "3"});
    cmd.capture_output = false;  // the ranks' logs go straight to this terminal
    cmd.report_stream = true;    // their final records say how they ended
    MOE_ASSIGN_OR_RETURN(auto p, RankProcess::Start(cmd));
    ranks.push_back({std::move(p), false});
  }
  return ranks;
}

// Watches the ranks until every one has ended. After the first failure the others get
// `grace_seconds` to fail on their own (they do, within the job's collective timeout), then are
// killed.
void WatchRanks(std::vector<LocalRank>& ranks, double grace_seconds) {
  size_t remaining = ranks.size();
  bool failed = false;
  while (remaining > 0) {
    const int sig = g_signal;
    if (sig != 0) {
      g_signal = 0;
      for (auto& r : ranks)
        if (!r.done) r.process->Signal(sig);
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      LocalRank& r = ranks[i];
      if (r.done) continue;
      r.process->Pump(0, nullptr, nullptr);  // drains the report stream, enforces kill deadlines
      if (!r.process->Reap()) continue;
      r.done = true;
      --remaining;
      const RankEnd end = r.process->exit().Outcome();
      if (end.ok()) continue;
      std::fprintf(stderr, "moe-train: rank %zu %s\n", i, r.process->exit().Describe().c_str());
      if (!failed) {
        failed = true;
        for (auto& other : ranks)
          if (!other.done) other.process->KillAt(MonotonicSeconds() + grace_seconds);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// When every rank that failed ended the same way (bad input, stopped, cannot run here), the
// launcher says it too; anything else is a failure a retry may fix. The ranks' common failure. A
// permanent one wins (a rank's missing dataset is exit 4, whatever its peers then hit: a closed
// connection, the launcher's stop), and ranks that only stopped do not hide the failure that
// stopped them.
int ExitCode(const std::vector<LocalRank>& ranks) {
  int common = kExitOk, permanent = kExitOk;
  bool first = true, any_failed = false;
  std::string report;
  for (const auto& r : ranks) {
    const RankEnd end = r.process->exit().Outcome();
    any_failed |= !end.ok() && end.failure_class != FailureClass::kStopped;
    if (end.failure_class == FailureClass::kPermanent && permanent == kExitOk)
      permanent = end.exit_code();
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankExit& e = ranks[i].process->exit();
    const RankEnd end = e.Outcome();
    if (end.ok()) continue;
    report += " rank " + std::to_string(i) + " " + e.Describe() + ";";
    if (any_failed && end.failure_class == FailureClass::kStopped) continue;
    common = first || common == end.exit_code() ? end.exit_code() : kExitTransient;
    first = false;
  }
  if (common == kExitOk) return kExitOk;
  std::fprintf(stderr, "moe-train: %s:%s\n",
               common == kExitStopped && permanent == kExitOk ? "stopped" : "the job failed",
               report.c_str());
  if (permanent != kExitOk) return permanent;
  return common == kExitBadInput || common == kExitStopped || common == kExitCannotRun
             ? common
             : kExitTransient;
}

}  // namespace

int LaunchLocalRanks(const LaunchOptions& o) {
  char tmpl[] = "/tmp/moe-rendezvous.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("moe-train: mkdtemp");
    return kExitTransient;
  }
  const std::string rdzv = tmpl;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads_per_rank > 0 ? o.threads_per_rank : std::max(1, hw / o.nproc);
  std::fprintf(stderr, "moe-train: launching %d ranks (%d threads each), rendezvous file://%s\n",
               o.nproc, threads, rdzv.c_str());
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  auto ranks = StartRanks(o, rdzv, threads);
  if (!ranks.ok()) {
    std::fprintf(stderr, "moe-train: %s\n", ranks.status().ToString().c_str());
    return kExitTransient;  // the ranks started so far are killed with their RankProcess
  }
  WatchRanks(*ranks, o.grace_seconds);
  if (Status st = RemoveAll(rdzv); !st.ok())
    std::fprintf(stderr, "moe-train: %s\n", st.ToString().c_str());
  return ExitCode(*ranks);
}

}  // namespace moe::train
