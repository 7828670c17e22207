#include "worker/engine/comm/process_group.h"

namespace moe {

StatusOr<std::unique_ptr<ProcessGroups>> ProcessGroups::Create(int world, int rank, int expert_parallel, KvStore* store,
                                                               const GroupOptions& options) {
  if (world < 1 || rank < 0 || rank >= world) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " of world size " + std::to_string(world));
  }
  if (expert_parallel < 1 || world % expert_parallel != 0) {
    return InvalidArgumentError("expert_parallel " + std::to_string(expert_parallel) + " does not divide world size " +
                                std::to_string(world));
  }
  auto groups = std::unique_ptr<ProcessGroups>(new ProcessGroups());
  ParallelContext& c = groups->ctx_;
  c.world_size = world;
  c.rank = rank;
  c.expert_parallel = expert_parallel;
  if (world == 1) {
    c.world = &groups->local_.world;
    c.ep_group = &groups->local_.ep;
    c.expert_dp = &groups->local_.edp;
    return groups;
  }
  if (store == nullptr) return InvalidArgumentError("a rendezvous store is needed for world size > 1");
  auto make = [&](const std::string& prefix, int r, int n) -> StatusOr<std::unique_ptr<Communicator>> {
    if (n == 1) return std::unique_ptr<Communicator>(new LocalCommunicator());
    PrefixStore ps(prefix, store);
    if (options.backend == "gloo") return CreateGlooCommunicator(r, n, &ps, options);
    if (options.backend == "nccl") return CreateNcclCommunicator(r, n, &ps, options);
    return InvalidArgumentError("unknown communication backend '" + options.backend + "' (gloo or nccl)");
  };
  const int ep = expert_parallel, group = rank / ep, ep_rank = rank % ep;
  MOE_ASSIGN_OR_RETURN(groups->world_, make("world", rank, world));
  MOE_ASSIGN_OR_RETURN(groups->ep_, make("ep" + std::to_string(group), ep_rank, ep));
  MOE_ASSIGN_OR_RETURN(groups->edp_, make("edp" + std::to_string(ep_rank), group, world / ep));
  c.world = groups->world_.get();
  c.ep_group = groups->ep_.get();
  c.expert_dp = groups->edp_.get();
  return groups;
}

#ifndef MOE_WITH_GLOO
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int, int, KvStore*, const GroupOptions&) {
  return UnimplementedError("this build has no Gloo (install libgloo-dev and rebuild)");
}
bool HaveGloo() { return false; }
#endif
#ifndef MOE_WITH_NCCL
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int, int, KvStore*, const GroupOptions&) {
  return UnimplementedError("this build has no NCCL (build with the CUDA toolkit)");
}
bool HaveNccl() { return false; }
#endif

}  // namespace moe
