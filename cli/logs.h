// moectl logs JOB [--rank R] [--attempt N] [-f] [--tail N]: a rank's output, from the worker that
// runs or ran it, through the controller (kubectl logs' habits).
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
};

int Logs(Client& c, const LogsArgs& a);

}  // namespace moe::cli
