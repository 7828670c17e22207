// One rank as a child process: started, watched and stopped in one place, for the worker agent (one
// rank per assignment) and for `moe-train --nproc` (N local ranks).
//
// Start: fork + exec with everything the child needs (argv, fds) prepared before the fork, so that
// between fork and exec the child makes only async-signal-safe calls (prctl, dup2, fcntl, execv,
// write, _exit): the parent is multi-threaded, and a malloc lock held by another thread at fork
// time would deadlock a child that allocates. The child dies with its parent (PR_SET_PDEATHSIG), as
// a rank on a lost node would. Its report stream (fd 3 in the child) carries JSON lines: one per
// step, then the final record of common/rank_end.h.
//
// Threads: one thread owns a RankProcess and calls everything but RequestStop and KillAt, which any
// thread may call: they only record the wish, and the owner's next Pump sends the signals (so a
// signal never reaches a pid that was already reaped and reused).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/rank_end.h"
#include "common/status.h"

namespace moe {

struct RankCommand {
  std::string program;            // absolute path of the executable
  std::vector<std::string> args;  // argv[1..]
  bool capture_output =
      true;  // stdout and stderr through a pipe (Pump's on_output); else inherited
  bool report_stream =
      true;  // a pipe on the child's fd 3 (the program must be told: --report-fd 3)
  bool die_with_parent = true;  // PR_SET_PDEATHSIG = SIGKILL
};

// How the process ended.
struct RankExit {
  int wait_status = 0;
  std::optional<RankEnd> record;  // the final record it wrote, if any
  std::string last_output;        // its last non-empty output line (context when it crashed)

  bool exited() const;
  int exit_code() const;  // -signal when killed
  // "exited with code 4", "was killed by signal 9 (Killed)".
  std::string Describe() const;
  // The record when there is one; else one derived from the exit status (a crash is transient).
  RankEnd Outcome() const;
};

class RankProcess {
 public:
  using LineFn = std::function<void(const std::string& line)>;

  static StatusOr<std::unique_ptr<RankProcess>> Start(const RankCommand& command);
  // A process still running is killed (SIGKILL) and reaped.
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Waits up to `timeout_seconds` for output, then hands each complete line to on_report (step
  // reports; the final record is kept, not passed on) or on_output. Also enforces a pending kill
  // deadline. Returns false once both pipes have closed.
  bool Pump(double timeout_seconds, const LineFn& on_report, const LineFn& on_output);
  // Non-blocking: true once the process has ended and its pipes are drained.
  bool Reap();
  // Blocks until the process ended (pumping its pipes), then returns how.
  RankExit Wait(const LineFn& on_report = nullptr, const LineFn& on_output = nullptr);
  const RankExit& exit() const { return exit_; }
  bool ended() const { return ended_; }

  // SIGTERM at the next Pump, SIGKILL `grace_seconds` later unless it ended. Any thread.
  void RequestStop(double grace_seconds);
  bool stop_requested() const { return stop_requested_; }
  // SIGKILL at `monotonic_seconds` (steady clock) unless it ended first. Any thread.
  void KillAt(double monotonic_seconds);
  // Sends `sig` now (owner thread only; nothing once it has been reaped).
  void Signal(int sig);

 private:
  RankProcess() = default;
  void HandleLine(bool report, const std::string& line, const LineFn& on_report,
                  const LineFn& on_output);
  void CloseFd(int index);

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};  // report, output (read ends)
  std::string partial_[2];
  RankExit exit_;
  bool ended_ = false;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> term_pending_{false};
  std::atomic<double> kill_at_{0};  // 0: none
};

// Seconds on the steady clock (for KillAt).
double MonotonicSeconds();

}  // namespace moe
