#include "worker/engine/parallel/process_group.h"

#include <algorithm>
#include <cstdio>

#include "worker/engine/parallel/gloo_comm.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/parallel/nccl_comm.h"

namespace moe::parallel {

StatusOr<GroupLayout> LayoutGroups(int world, int rank, int pipeline_parallel,
                                   int expert_parallel) {
  const auto str = [](int v) { return std::to_string(v); };
  if (world < 1 || rank < 0 || rank >= world)
    return InvalidArgumentError("rank " + str(rank) + " of world size " + str(world));
  if (pipeline_parallel < 1 || world % pipeline_parallel != 0) {
    return InvalidArgumentError("pipeline_parallel " + str(pipeline_parallel) +
                                " does not divide world size " + str(world));
  }
  const int dp = world / pipeline_parallel, ep = expert_parallel;
  if (ep < 1 || dp % ep != 0) {
    return InvalidArgumentError(
        "expert_parallel " + str(ep) + " does not divide the data-parallel size " + str(dp) +
        " (world size " + str(world) + " / pipeline_parallel " + str(pipeline_parallel) + ")");
  }
  const RankCoordinates at = RankLayout(rank, world, pipeline_parallel, ep);
  const int stage = at.pp, dp_rank = at.dp, ep_rank = at.ep, first = stage * dp;
  const auto ranks = [](int count, int start, int stride) {
    std::vector<int> r;
    for (int i = 0; i < count; ++i) r.push_back(start + i * stride);
    return r;
  };
  GroupLayout g;
  g.world = {"world", ranks(world, 0, 1)};
  g.dp = {"dp" + str(stage), ranks(dp, first, 1)};
  g.ep = {"ep" + str(rank / ep), ranks(ep, rank - ep_rank, 1)};
  g.expert_dp = {"edp" + str(stage) + "_" + str(ep_rank), ranks(dp / ep, first + ep_rank, ep)};
  g.pipeline = {"pp" + str(dp_rank), ranks(pipeline_parallel, dp_rank, dp)};
  if (stage == 0 || stage == pipeline_parallel - 1) {
    std::vector<int> ends = {dp_rank};
    if (pipeline_parallel > 1) ends.push_back(dp_rank + (pipeline_parallel - 1) * dp);
    g.embedding = GroupLayout::Group{"emb" + str(dp_rank), ends};
  }
  return g;
}

StatusOr<std::unique_ptr<ProcessGroups>> ProcessGroups::Create(int world, int rank,
                                                               int pipeline_parallel,
                                                               int expert_parallel, KvStore* store,
                                                               const GroupOptions& options) {
  MOE_ASSIGN_OR_RETURN(GroupLayout layout,
                       LayoutGroups(world, rank, pipeline_parallel, expert_parallel));
  if (world > 1 && store == nullptr)
    return InvalidArgumentError("a rendezvous store is needed for world size > 1");
  auto groups = std::unique_ptr<ProcessGroups>(new ProcessGroups());
  ParallelContext& c = groups->ctx_;
  c.world_size = world;
  c.rank = rank;
  c.pipeline_parallel = pipeline_parallel;
  c.expert_parallel = expert_parallel;
  // Every rank joins its groups in this order, so a group's members all reach it (each earlier kind
  // of group completes on every rank first) and none waits forever.
  MOE_ASSIGN_OR_RETURN(c.world, groups->Join(layout.world, store, options));
  MOE_ASSIGN_OR_RETURN(c.dp_group, groups->Join(layout.dp, store, options, /*gradients=*/true));
  MOE_ASSIGN_OR_RETURN(c.ep_group, groups->Join(layout.ep, store, options));
  MOE_ASSIGN_OR_RETURN(c.expert_dp,
                       groups->Join(layout.expert_dp, store, options, /*gradients=*/true));
  MOE_ASSIGN_OR_RETURN(c.pipeline, groups->Join(layout.pipeline, store, options));
  if (layout.embedding) {
    MOE_ASSIGN_OR_RETURN(c.embedding, groups->Join(*layout.embedding, store, options));
  }
  return groups;
}

// A group whose members (in the same order) already have a communicator of the same kind shares it:
// every member sees the same earlier groups, so all of them share it or none does. The gradient
// groups (dp_group, expert_dp) never share one with the others: their reductions overlap the
// backward's all-to-alls and point to point, which would otherwise queue behind them (one Gloo
// thread, one NCCL stream per communicator).
StatusOr<Communicator*> ProcessGroups::Join(const GroupLayout::Group& group, KvStore* store,
                                            const GroupOptions& options, bool gradients) {
  for (const auto& [members, grad, comm] : joined_) {
    if (members == group.members && grad == gradients) return comm;
  }
  const int n = static_cast<int>(group.members.size());
  const int r = static_cast<int>(std::find(group.members.begin(), group.members.end(), ctx_.rank) -
                                 group.members.begin());
  std::unique_ptr<Communicator> comm;
  if (n == 1) {
    comm = std::make_unique<LocalCommunicator>();
  } else {
    PrefixStore ps((gradients ? "grad_" : "") + group.key, store);
    if (options.backend == "gloo") {
      MOE_ASSIGN_OR_RETURN(comm, CreateGlooCommunicator(r, n, &ps, options));
    } else if (options.backend == "nccl") {
      MOE_ASSIGN_OR_RETURN(comm, CreateNcclCommunicator(r, n, &ps, options));
    } else {
      return InvalidArgumentError("unknown communication backend '" + options.backend +
                                  "' (gloo or nccl)");
    }
  }
  owned_.push_back(std::move(comm));
  joined_.emplace_back(group.members, gradients, owned_.back().get());
  return owned_.back().get();
}

#ifndef MOE_WITH_GLOO
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int, int, KvStore*,
                                                               const GroupOptions&) {
  return UnimplementedError("this build has no Gloo (install libgloo-dev and rebuild)");
}
bool HaveGloo() { return false; }
#endif
#ifndef MOE_WITH_NCCL
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int, int, KvStore*,
                                                               const GroupOptions&) {
  return UnimplementedError("this build has no NCCL (build with the CUDA toolkit)");
}
bool HaveNccl() { return false; }
std::string NcclVersion() { return ""; }
#endif

}  // namespace moe::parallel
