// The dropless all-to-all token dispatcher of an MoE layer.
//
// Input: the permuted token rows of this rank, grouped by global expert (counts per global expert).
// Dispatch sends each expert's rows to the rank of its EP group that owns it (experts are owned in
// contiguous blocks of E/EP), exchanges the counts first, and regroups what arrives by local expert so
// grouped GEMMs see each expert's rows contiguously. Combine is the exact inverse. Their backward
// passes route gradients the same ways (a permutation's adjoint is its inverse). Ranks that send or
// receive nothing work: their blocks are empty.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/comm/communicator.h"

namespace moe {

class TokenDispatcher {
 public:
  struct Route {
    std::vector<int64_t> send_rows;      // [P] rows this rank sends to each rank of the EP group
    std::vector<int64_t> recv_rows;      // [P] rows it receives from each
    std::vector<int64_t> local_offsets;  // [E/P + 1] rows per local expert, after regrouping
    // [E/P x P + 1] the same rows by (local expert, source rank): the bounds of what one rank's
    // micro-batch sent one expert (deterministic training sums expert gradients by these segments).
    std::vector<int64_t> segments;
    Tensor regroup;                      // i32 [R_local]: received row for each regrouped row
    Tensor ungroup;                      // i32 [R_local]: the inverse permutation
    int64_t local_rows = 0;
  };

  // `ep_group` may be null for EP = 1. `alltoall_seconds` (optional) accumulates time in all-to-all.
  TokenDispatcher(Communicator* ep_group, int64_t num_experts, double* alltoall_seconds);

  int64_t local_experts() const { return num_experts_ / group_size_; }
  int64_t first_local_expert() const { return local_experts() * rank_; }

  // xp [R, h] grouped by global expert (counts [E]) -> rows for this rank's experts [R_local, h].
  StatusOr<Tensor> Dispatch(const Tensor& xp, const std::vector<int64_t>& counts, Route* route);
  // y_local [R_local, h] -> [R, h] in the order Dispatch took them from.
  StatusOr<Tensor> Combine(const Tensor& y_local, const Route& route);
  // Backward of Combine: dyp [R, h] -> [R_local, h].
  StatusOr<Tensor> CombineBackward(const Tensor& dyp, const Route& route) { return Forward(dyp, route); }
  // Backward of Dispatch: dx_local [R_local, h] -> [R, h].
  StatusOr<Tensor> DispatchBackward(const Tensor& dx_local, const Route& route) { return Combine(dx_local, route); }

 private:
  StatusOr<Tensor> Forward(const Tensor& rows, const Route& route);
  Status Exchange(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                  const std::vector<int64_t>& recv_rows);

  Communicator* comm_;
  int64_t num_experts_;
  int group_size_ = 1;
  int rank_ = 0;
  double* alltoall_seconds_;
};

}  // namespace moe
