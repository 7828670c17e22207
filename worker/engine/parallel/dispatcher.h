// The dropless all-to-all token dispatcher of an MoE layer.
//
// Input: the permuted token rows of this rank, grouped by global expert (counts per global expert).
// Dispatch sends each expert's rows to the rank of its EP group that owns it (experts are owned in
// contiguous blocks of E/EP), exchanges the counts first, and regroups what arrives by local expert
// so grouped GEMMs see each expert's rows contiguously. Combine is the exact inverse. Their
// backward passes route gradients the same ways (a permutation's adjoint is its inverse). Ranks
// that send or receive nothing work: their blocks are empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/phase_timer.h"

namespace moe::parallel {

class TokenDispatcher {
 public:
  struct Route {
    std::vector<int64_t> send_rows;      // [P] rows this rank sends to each rank of the EP group
    std::vector<int64_t> recv_rows;      // [P] rows it receives from each
    std::vector<int64_t> local_offsets;  // [E/P + 1] rows per local expert, after regrouping
    // [E/P x P + 1] the same rows by (local expert, source rank): the bounds of what one rank's
    // micro-batch sent one expert (deterministic training sums expert gradients by these segments).
    std::vector<int64_t> segments;
    Tensor regroup;  // i32 [R_local]: received row for each regrouped row
    Tensor ungroup;  // i32 [R_local]: the inverse permutation
    int64_t local_rows = 0;
  };

  // Rows on their way: a half started (the rows sent) and not yet finished (received), so that work
  // which does not need them runs in between (the shared expert beside the dispatch, the router's
  // backward beside the dispatch's backward). Finish it before starting the next on this
  // dispatcher.
  struct InFlight {
    Pending op;            // null when nothing moves (EP = 1)
    Tensor rows;           // what arrives
    bool regroup = false;  // arrived in source-rank order: regroup by local expert at the finish
  };

  // `ep_group` may be null for EP = 1. `phases` (optional) gets a kAllToAll span around each part
  // of the all-to-all: exchanging the counts, starting the rows, and waiting for them at the finish
  // (on CUDA the spans are device marks: the wait's span is how long the kernels stood still for
  // the rows, not the host's queueing; phase_timer.h).
  TokenDispatcher(Communicator* ep_group, int64_t num_experts, PhaseTimer* phases);

  int64_t local_experts() const { return num_experts_ / group_size_; }
  int64_t first_local_expert() const { return local_experts() * rank_; }

  // xp [R, h] grouped by global expert (counts [E]) -> rows for this rank's experts [R_local, h].
  // Exchanges the counts (a host all-to-all), fills `route`, sends the rows.
  Status DispatchStart(const Tensor& xp, const std::vector<int64_t>& counts, Route* route,
                       InFlight* f);
  // y_local [R_local, h] -> [R, h] in the order the dispatch took them from.
  Status CombineStart(const Tensor& y_local, const Route& route, InFlight* f);
  // Backward of the combine: dyp [R, h] -> [R_local, h] (the dispatch's way).
  Status CombineBackwardStart(const Tensor& dyp, const Route& route, InFlight* f) {
    return Send(dyp, route, f);
  }
  // Backward of the dispatch: dx_local [R_local, h] -> [R, h] (the combine's way).
  Status DispatchBackwardStart(const Tensor& dx_local, const Route& route, InFlight* f) {
    return CombineStart(dx_local, route, f);
  }
  // Waits for the rows of any of the four (regrouped by local expert after a dispatch's way).
  StatusOr<Tensor> Finish(InFlight* f, const Route& route);

 private:
  Status Send(const Tensor& rows, const Route& route, InFlight* f);
  bool StaysHere(const Tensor& rows,
                 InFlight* f) const;  // EP = 1: the rows are the result, nothing moves
  void MakeRoute(const std::vector<int64_t>& counts, const std::vector<int64_t>& recv_counts,
                 Route* route) const;
  Pending StartExchange(const Tensor& send, const std::vector<int64_t>& send_rows,
                        const Tensor& recv, const std::vector<int64_t>& recv_rows);

  Communicator* comm_;
  int64_t num_experts_;
  int group_size_ = 1;
  int rank_ = 0;
  PhaseTimer* phases_;
};

}  // namespace moe::parallel
