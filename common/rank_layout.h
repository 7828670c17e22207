// Where a rank sits in a pipeline x data x expert parallel job, with one home: the engine's
// communicators (worker/engine/parallel), the group layout and the controller's placement records
// all ask here. Ranks are laid out stage-major: a stage's dp = world / pipeline_parallel ranks are
// consecutive, and within a stage each run of expert_parallel ranks is one EP group.
#pragma once

#include <algorithm>

namespace moe {

struct RankCoordinates {
  int pp = 0;  // pipeline stage
  int dp = 0;  // data-parallel rank within the stage
  int ep = 0;  // rank within its expert-parallel group
};

// The sizes must divide (world by pipeline_parallel, that quotient by expert_parallel); sizes below
// 1 count as 1.
inline RankCoordinates RankLayout(int rank, int world, int pipeline_parallel, int expert_parallel) {
  const int dp_size = std::max(1, world / std::max(1, pipeline_parallel));
  RankCoordinates c;
  c.pp = rank / dp_size;
  c.dp = rank % dp_size;
  c.ep = c.dp % std::max(1, expert_parallel);
  return c;
}

}  // namespace moe
