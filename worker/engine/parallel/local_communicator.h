// The communicator of a group of one (W = 1, and every group of one in a larger layout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::parallel {

// A group of one: collectives are copies or no-ops.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  Status AllReduceSum(const Tensor&) override { return OkStatus(); }
  Status AllReduceSumHost(double*, int64_t) override { return OkStatus(); }
  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override;
  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n_per_rank) override;
  Status AllGatherHost(const void* send, void* recv, size_t bytes) override;
  Status BroadcastHost(void*, size_t, int) override { return OkStatus(); }
  Status Barrier() override { return OkStatus(); }
  Status ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override;
  Status AllGather(const Tensor& t, const std::vector<int64_t>& counts) override;
  Status Exchange(const std::vector<P2POp>& ops) override;
};

// A single-rank context over LocalCommunicators (owned by the returned object).
struct LocalParallel {
  LocalCommunicator world, dp, ep, edp, pipeline, embedding;
  ParallelContext ctx;
  LocalParallel() {
    ctx.world = &world;
    ctx.dp_group = &dp;
    ctx.ep_group = &ep;
    ctx.expert_dp = &edp;
    ctx.pipeline = &pipeline;
    ctx.embedding = &embedding;
  }
};

}  // namespace moe::parallel
