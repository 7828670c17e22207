#include "kernels/permute.h"

#include <gtest/gtest.h>

#include "kernels/elementwise.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(DispatchPlan, GroupsSlotsByExpertInTokenOrderWithEmptyExperts) {
  // 4 tokens, top-2, 5 experts; experts 1 and 4 get nothing.
  const std::vector<int32_t> idx = {2, 0, 0, 3, 2, 3, 0, 2};
  DispatchPlan plan = BuildDispatchPlan(idx.data(), 4, 2, 5);
  EXPECT_EQ(plan.counts, (std::vector<int64_t>{3, 0, 3, 2, 0}));
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 3, 3, 6, 8, 8}));
  // Expert 0 rows: tokens 0, 1, 3; expert 2: tokens 0, 2, 3; expert 3: tokens 1, 2.
  EXPECT_EQ(plan.token_of_row, (std::vector<int32_t>{0, 1, 3, 0, 2, 3, 1, 2}));
  for (size_t s = 0; s < idx.size(); ++s) {
    EXPECT_EQ(plan.token_of_row[static_cast<size_t>(plan.row_of_slot[s])],
              static_cast<int32_t>(s / 2));
  }
}

// The Tensor-level call on the CPU: its tensors are the host plan's (on the CPU it is that plan,
// written into tensors); wrong shapes, types and expert ids are refused by name. The CUDA kernels
// are checked against the host plan by gpu_routing_emulated (on the CPU emulator) and the GPU
// check.
TEST(Permute, DevicePlanTensorsEqualTheHostPlan) {
  const int64_t tokens = 37, k = 3, experts = 7;
  Tensor topk = Tensor::Empty({tokens, k}, DType::kI32);
  for (int64_t t = 0; t < tokens;
       ++t) {  // distinct per token; expert 5 never chosen: an empty group
    topk.data<int32_t>()[t * k] = static_cast<int32_t>(t % 3);
    topk.data<int32_t>()[t * k + 1] = static_cast<int32_t>(3 + t % 2);
    topk.data<int32_t>()[t * k + 2] = 6;
  }
  const DispatchPlan plan = BuildDispatchPlan(topk.data<int32_t>(), tokens, k, experts);
  Tensor counts = Tensor::Empty({experts}, DType::kI64),
         ros = Tensor::Empty({tokens, k}, DType::kI32);
  Tensor tor = Tensor::Empty({tokens * k}, DType::kI32);
  BuildDispatchPlanOnDevice(topk, experts, counts, ros, tor);
  EXPECT_EQ(counts.ToVector<int64_t>(), plan.counts);
  EXPECT_EQ(ros.ToVector<int32_t>(), plan.row_of_slot);
  EXPECT_EQ(tor.ToVector<int32_t>(), plan.token_of_row);
  EXPECT_EQ(plan.counts[5], 0);
  Tensor counts32 = Tensor::Empty({experts}, DType::kI32);
  EXPECT_DEATH(BuildDispatchPlanOnDevice(topk, experts, counts32, ros, tor),
               "BuildDispatchPlanOnDevice: topk_idx i32");
  topk.data<int32_t>()[4] = static_cast<int32_t>(experts);
  EXPECT_DEATH(BuildDispatchPlanOnDevice(topk, experts, counts, ros, tor), "expert 7 out of range");
}

TEST(Permute, GatherCombineAndTheirBackwardsMatchFiniteDifferences) {
  const int64_t tokens = 6, k = 3, experts = 4, d = 5;
  Tensor topk = RandomInts({tokens, k}, 1, static_cast<int32_t>(experts));
  // Distinct experts per token, as the router guarantees.
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < k; ++j)
      topk.data<int32_t>()[t * k + j] = static_cast<int32_t>((t + j) % experts);
  DispatchPlan plan = BuildDispatchPlan(topk.data<int32_t>(), tokens, k, experts);
  Tensor token_of_row = Tensor::FromVector(plan.token_of_row, {tokens * k});
  Tensor row_of_slot = Tensor::FromVector(plan.row_of_slot, {tokens, k});
  Tensor x = RandomTensor({tokens, d}, 2), w = RandomTensor({tokens, k}, 3);
  Tensor gp = RandomTensor({tokens * k, d}, 4), gy = RandomTensor({tokens, d}, 5);
  Tensor yp = RandomTensor({tokens * k, d}, 6);
  // Gather: d/dx of <gather(x), gp> is PermuteBackward(gp).
  auto gather_loss = [&] {
    Tensor xp = Tensor::Empty({tokens * k, d}, DType::kF64);
    GatherRows(x, token_of_row, xp);
    return Dot(xp, gp);
  };
  Tensor dx = Tensor::Empty({tokens, d}, DType::kF64);
  Poison(dx);
  PermuteBackward(gp, row_of_slot, dx);
  EXPECT_TRUE(GradientMatches(gather_loss, x, dx));
  // Combine: y = sum_j w yp[row]; gradients to yp and w.
  auto combine_loss = [&] {
    Tensor y = Tensor::Zeros({tokens, d}, DType::kF64);
    CombineForward(yp, row_of_slot, w, y);
    return Dot(y, gy);
  };
  Tensor dyp = Tensor::Empty(yp.shape(), DType::kF64), dw = Tensor::Empty(w.shape(), DType::kF64);
  Poison(dyp);
  Poison(dw);
  CombineBackward(gy, yp, row_of_slot, w, dyp, dw);
  EXPECT_TRUE(GradientMatches(combine_loss, yp, dyp));
  EXPECT_TRUE(GradientMatches(combine_loss, w, dw));
}

}  // namespace
}  // namespace moe::kernels
