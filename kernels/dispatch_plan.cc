#include "kernels/dispatch_plan.h"

#include "common/check.h"

namespace moe::kernels {

DispatchPlan BuildDispatchPlan(const int32_t* topk_idx, int64_t num_tokens, int64_t top_k,
                               int64_t num_experts) {
  DispatchPlan plan;
  plan.num_tokens = num_tokens;
  plan.top_k = top_k;
  plan.num_experts = num_experts;
  const int64_t slots = num_tokens * top_k;
  plan.counts.assign(static_cast<size_t>(num_experts), 0);
  for (int64_t s = 0; s < slots; ++s) {
    MOE_CHECK(topk_idx[s] >= 0 && topk_idx[s] < num_experts)
        << "expert " << topk_idx[s] << " out of range";
    ++plan.counts[static_cast<size_t>(topk_idx[s])];
  }
  plan.offsets.assign(static_cast<size_t>(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e)
    plan.offsets[static_cast<size_t>(e) + 1] =
        plan.offsets[static_cast<size_t>(e)] + plan.counts[static_cast<size_t>(e)];
  std::vector<int64_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  plan.token_of_row.resize(static_cast<size_t>(slots));
  plan.row_of_slot.resize(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t row = next[static_cast<size_t>(topk_idx[s])]++;
    plan.row_of_slot[static_cast<size_t>(s)] = static_cast<int32_t>(row);
    plan.token_of_row[static_cast<size_t>(row)] = static_cast<int32_t>(s / top_k);
  }
  return plan;
}

}  // namespace moe::kernels
