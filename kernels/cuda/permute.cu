// The MoE dispatch on the device: the plan (BuildDispatchPlanOnDevice, a stable counting sort) and
// the row movements: PermuteBackward (dx[t] = sum_j dxp[row_of_slot[t,j]]), CombineForward (y[t] +=
// sum_j w[t,j] yp[row]) and CombineBackward (dyp[row] = w dy[t]; dw = <dy[t], yp[row]>): in 16-byte
// vectors with 32-bit indices where the rows allow, else an element a thread.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/permute_kernels.cuh"
#include "kernels/cuda/routing_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row) {
  static_assert(routing::kBadExpertBit == kBadExpert,
                "routing_kernels.cuh's bit is kernels/runtime.h's");
  CheckOnCuda({&topk_idx, &counts, &row_of_slot, &token_of_row}, "BuildDispatchPlanOnDevice");
  MOE_CHECK(num_experts <= 8192)
      << "BuildDispatchPlanOnDevice: " << num_experts
      << " experts (at most 8,192: the histogram lives in shared memory)";
  const int64_t slots = topk_idx.numel(), k = topk_idx.dim(1);
  auto* c = static_cast<unsigned long long*>(counts.raw());
  MOE_CHECK(cudaMemsetAsync(c, 0, counts.nbytes(), Stream()) == cudaSuccess)
      << "BuildDispatchPlanOnDevice: " << LastError();
  if (slots > 0) {
    const unsigned blocks = std::min<unsigned>(Blocks(slots), 1024);
    routing::CountExpertsKernel<<<blocks, kThreads,
                                  sizeof(unsigned) * static_cast<size_t>(num_experts), Stream()>>>(
        Ptr<int32_t>(topk_idx), slots, num_experts, c, BadIndexFlags());
    routing::FillExpertRowsKernel<<<static_cast<unsigned>(num_experts), kThreads,
                                    routing::FillSharedBytes(kThreads), Stream()>>>(
        Ptr<int32_t>(topk_idx), slots, k, num_experts, c, Ptr<int32_t>(row_of_slot),
        Ptr<int32_t>(token_of_row));
  }
  CheckLaunch("BuildDispatchPlanOnDevice");
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  CheckOnCuda({&dxp, &row_of_slot, &dx}, "PermuteBackward");
  const int64_t tokens = dx.dim(0), k = row_of_slot.dim(1), d = dx.dim(1);
  MOE_CUDA_TYPED(StorageType({&dxp, &dx}, "PermuteBackward"), T, {
    constexpr int L = Vec16<T>::kLanes;
    if (d % L == 0 && VectorOk(tokens * d, {dxp.raw(), dx.raw()})) {
      PermuteBackwardVecKernel<T><<<Blocks(tokens * d / L), kThreads, 0, Stream()>>>(
          Ptr<T>(dxp), Ptr<int32_t>(row_of_slot), Ptr<T>(dx), tokens, k, d);
    } else if (tokens * d > 0) {
      PermuteBackwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(
          Ptr<T>(dxp), Ptr<int32_t>(row_of_slot), Ptr<T>(dx), tokens, k, d);
    }
  });
  CheckLaunch("PermuteBackward");
}

void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y) {
  CheckOnCuda({&yp, &row_of_slot, &w, &y}, "CombineForward");
  const int64_t tokens = y.dim(0), k = row_of_slot.dim(1), d = y.dim(1);
  MOE_CUDA_TYPED(StorageType({&yp, &w, &y}, "CombineForward"), T, {
    constexpr int L = Vec16<T>::kLanes;
    if (d % L == 0 && VectorOk(tokens * d, {yp.raw(), y.raw()})) {
      CombineForwardVecKernel<T><<<Blocks(tokens * d / L), kThreads, 0, Stream()>>>(
          Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w), Ptr<T>(y), tokens, k, d);
    } else if (tokens * d > 0) {
      CombineForwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(
          Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w), Ptr<T>(y), tokens, k, d);
    }
  });
  CheckLaunch("CombineForward");
}

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w,
                     const Tensor& dyp, const Tensor& dw) {
  CheckOnCuda({&dy, &yp, &row_of_slot, &w, &dyp, &dw}, "CombineBackward");
  const int64_t tokens = dy.dim(0), k = row_of_slot.dim(1), d = dy.dim(1);
  MOE_CUDA_TYPED(StorageType({&dy, &yp, &w, &dyp, &dw}, "CombineBackward"), T, {
    constexpr int L = Vec16<T>::kLanes;
    if (tokens * k > 0 && d % L == 0 && VectorOk(tokens * d, {dy.raw(), yp.raw(), dyp.raw()})) {
      CombineBackwardVecKernel<T><<<static_cast<unsigned>(tokens * k), kThreads, 0, Stream()>>>(
          Ptr<T>(dy), Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w), Ptr<T>(dyp), Ptr<T>(dw), k,
          d);
    } else if (tokens * k > 0) {
      CombineBackwardKernel<T><<<static_cast<unsigned>(tokens * k), kThreads, 0, Stream()>>>(
          Ptr<T>(dy), Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w), Ptr<T>(dyp), Ptr<T>(dw), k,
          d);
    }
  });
  CheckLaunch("CombineBackward");
}

}  // namespace moe::kernels::cuda
