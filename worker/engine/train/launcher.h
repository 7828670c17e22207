// Local multi-process launch for moe-train --nproc N: one child process per rank (the same binary
// in rank mode, started and watched through common/rank_process.h), a fresh file rendezvous,
// signals forwarded, and a failure report when a rank dies.
#pragma once

#include <string>
#include <vector>

namespace moe::train {

struct LaunchOptions {
  int nproc = 1;
  std::string program;            // path of this binary (/proc/self/exe)
  std::vector<std::string> args;  // arguments for every rank (without --nproc)
  int threads_per_rank = 0;       // 0: cores / nproc
  double grace_seconds =
      65;  // after the first failure, how long the others get to fail on their own
};

// Returns the exit code for the launcher (common/rank_end.h): 0 when every rank succeeded; the code
// the failed ranks agree on (bad input, stopped, cannot run here); else 1.
int LaunchLocalRanks(const LaunchOptions& options);

}  // namespace moe::train
