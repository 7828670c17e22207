// Multi-rank tests in one process: ranks run as threads, each with its own communicators, meeting
// through a FileStore in a fresh directory (as moe-train's ranks meet through theirs).
#pragma once

#include <functional>

#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/store.h"

namespace moe::testing {

// Runs fn(rank, store) on n threads sharing one fresh store, and joins them.
void RunRanks(int n, const std::function<void(int rank, parallel::KvStore* store)>& fn);

// Runs fn(rank, communicator) on n threads of one Gloo group; `timeout` (seconds) bounds every op.
void RunGlooGroup(int n, const std::function<void(int rank, parallel::Communicator& comm)>& fn,
                  double timeout = 30);

// A Gloo group of two where rank 1 never calls anything (it hangs, then leaves): fn(comm) runs on
// rank 0 with every op bounded by `timeout` seconds; the whole run must end within 20 s.
void RunAgainstHungPeer(const std::function<void(parallel::Communicator& comm)>& fn,
                        double timeout = 2);

}  // namespace moe::testing
