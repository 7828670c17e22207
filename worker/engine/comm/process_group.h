// Builds a rank's communicators for the W = DP x EP layout: the world, its EP group (consecutive
// ranks) and its expert-data-parallel group (ranks holding the same experts), over one backend.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/comm/store.h"

namespace moe {

struct GroupOptions {
  std::string backend = "gloo";  // gloo (CPU, TCP) | nccl (GPU) | local (W = 1)
  double timeout_seconds = 60;   // every collective, and the rendezvous itself
  std::string hostname = "127.0.0.1";  // the address other ranks reach this one at (gloo)
  int cuda_device = 0;           // nccl
};

class ProcessGroups {
 public:
  // Collective over all `world` ranks: each calls it with its rank, the same store and options.
  static StatusOr<std::unique_ptr<ProcessGroups>> Create(int world, int rank, int expert_parallel, KvStore* store,
                                                         const GroupOptions& options);
  const ParallelContext& ctx() const { return ctx_; }

 private:
  ParallelContext ctx_;
  std::unique_ptr<Communicator> world_, ep_, edp_;
  LocalParallel local_;
};

// Backend factories (each compiled only where its library is).
// Creates a communicator among `size` ranks that all call it with the same store prefix.
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options);
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options);
bool HaveGloo();
bool HaveNccl();

}  // namespace moe
