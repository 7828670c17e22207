// moectl logs JOB [--rank R | --all-ranks] [--attempt N] [-f] [--tail N]: a rank's output, from the
// worker that runs or ran it, through the controller (kubectl logs' habits).
#pragma once

#include "cli/client.h"

namespace moe::cli {

struct LogsArgs {
  std::string id;
  int rank = 0;
  int attempt = 0;  // 0: the latest
  int tail = -1;    // > 0: the last N lines first; -1: everything
  bool follow = false;
  double interval = 1;
  // The rank's bytes as they are. Off, control characters (C0, C1, ANSI/OSC escape sequences, bidi
  // overrides) print as visible escapes: a rank's output cannot repaint the terminal or forge a
  // line.
  bool raw = false;
  bool all_ranks = false;  // every rank of the attempt, each line prefixed "[rank N] "
};

int Logs(Client& c, const LogsArgs& a);

}  // namespace moe::cli
