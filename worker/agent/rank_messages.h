// What an agent says about the ranks it is given, shared by the node agent (agent.cc,
// agent_ranks.cc) and fake mode's nodes (fake_fleet.cc): a rank's start, step and end as messages,
// the checks of an assignment's paths against the agent's roots, and the controller's hints.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/rank_end.h"
#include "common/status.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::worker {

// How the assigned rank ended: its outcome (the rank's final record, or what the agent knows), with
// the exit code it had (-1: it never ran).
moe::v1::RankFinished Finished(const moe::v1::Assignment& a, const RankEnd& end, int exit_code,
                               bool cancelled);
// A rank this agent did not run: `cls` says whether the job may run elsewhere (transient) or not at
// all.
moe::v1::RankFinished NotRun(const moe::v1::Assignment& a, FailureClass cls, StatusCode code,
                             std::string message);
// RankStarted (started) or an empty StepReport of the assignment's rank.
moe::v1::WorkerMessage AboutRank(const moe::v1::Assignment& a, bool started);

// The job's data and checkpoint paths against the agent's roots, symbolic links resolved here: no
// control character; a relative dataset path where the rank will find it, other relative paths
// below the first root; the dataset's own files (.bin, .idx), not only its prefix, below a data
// root. `checkpoint_roots` includes the controller's root where it was accepted.
Status CheckAssignmentPaths(const moe::v1::Assignment& a,
                            const std::vector<std::string>& data_roots,
                            const std::vector<std::string>& checkpoint_roots);
// Why `root` (the controller's checkpoint root, Registered.checkpoint_root) cannot serve as a
// checkpoint root here, or "" when it can.
std::string UnusableRoot(const std::string& root);
// The answer to an offered checkpoint root.
moe::v1::WorkerMessage RootMounted(const std::string& root, const std::string& why);

// A controller's fencing epoch against the highest this agent has seen (`*max`, raised to it): a
// lower one is a stale controller (another took over its state since), whose word no longer counts
// (logged, naming `what`).
bool AcceptControllerEpoch(std::atomic<int64_t>* max, int64_t epoch, const std::string& what);

// The most step reports one WorkerMessage.steps may carry (the controller refuses more).
inline constexpr size_t kMaxStepsPerMessage = 64;

// The controller's "retry after N ms" in a refused registration's message, in seconds (0: none).
double RetryHintSeconds(const std::string& message);

}  // namespace moe::worker
