// The dropless dispatch plan built on the host from the routing decisions: the reference the device
// plan (kernels/permute.h BuildDispatchPlanOnDevice) equals, and what the CPU backend builds it
// with.
#pragma once

#include <cstdint>
#include <vector>

namespace moe::kernels {

struct DispatchPlan {
  int64_t num_tokens = 0, top_k = 0, num_experts = 0;
  std::vector<int64_t> counts;        // [E] rows per expert
  std::vector<int64_t> offsets;       // [E + 1] first row of each expert
  std::vector<int32_t> token_of_row;  // [T*k] the token whose copy sits in row r
  std::vector<int32_t> row_of_slot;   // [T*k] where slot t*k + j sits
};

// Built on the host from the routing decisions (topk_idx [T, k] as host data).
DispatchPlan BuildDispatchPlan(const int32_t* topk_idx, int64_t num_tokens, int64_t top_k,
                               int64_t num_experts);

}  // namespace moe::kernels
