// Builds a rank's communicators for the W = PP x DP x EP layout (ParallelContext in communicator.h
// says who is in which group), over one backend.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/store.h"

namespace moe::parallel {

// The groups of one rank: each a list of global ranks in group-rank order, and the key that names
// it in the rendezvous store (unique among all groups of the job). Pure: no communication.
struct GroupLayout {
  struct Group {
    std::string key;
    std::vector<int> members;
  };
  Group world, dp, ep, expert_dp, pipeline;
  std::optional<Group> embedding;  // first and last stage only (a group of one when PP = 1)
};
// INVALID_ARGUMENT naming the argument when the layout does not divide.
StatusOr<GroupLayout> LayoutGroups(int world, int rank, int pipeline_parallel, int expert_parallel);

class ProcessGroups {
 public:
  // Collective over all `world` ranks: each calls it with its rank, the same store and options.
  // W = pipeline_parallel x DP with expert_parallel dividing DP. One communicator per distinct
  // membership and kind (at PP = 1 the world and ep_group may be one; dp_group and expert_dp, the
  // gradients' groups, have their own); groups of one are LocalCommunicators
  // (a store is needed only when W > 1).
  static StatusOr<std::unique_ptr<ProcessGroups>> Create(int world, int rank, int pipeline_parallel,
                                                         int expert_parallel, KvStore* store,
                                                         const GroupOptions& options);
  const ParallelContext& ctx() const { return ctx_; }

 private:
  StatusOr<Communicator*> Join(const GroupLayout::Group& group, KvStore* store,
                               const GroupOptions& options, bool gradients = false);

  ParallelContext ctx_;
  std::vector<std::unique_ptr<Communicator>> owned_;
  std::vector<std::tuple<std::vector<int>, bool, Communicator*>>
      joined_;  // (membership, gradients) -> communicator
};

}  // namespace moe::parallel
