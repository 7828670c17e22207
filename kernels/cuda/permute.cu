// The MoE dispatch on the device: the plan (BuildDispatchPlanOnDevice, a stable counting sort) and
// the row movements: PermuteBackward (dx[t] = sum_j dxp[row_of_slot[t,j]]), CombineForward (y[t] += sum_j w[t,j] yp[row])
// and CombineBackward (dyp[row] = w dy[t]; dw = <dy[t], yp[row]>).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moe::kernels::cuda {
namespace {

// The routing plan's three kernels. An expert index out of range counts as expert 0 (and is recorded).
__device__ __forceinline__ int ExpertOf(const int32_t* idx, int64_t s, int64_t experts) {
  const int e = idx[s];
  return e >= 0 && e < experts ? e : 0;
}

__global__ void CountExpertsKernel(const int32_t* idx, int64_t slots, int64_t experts, unsigned long long* counts,
                                   unsigned* flags) {
  MOE_CUDA_LOOP(s, slots) {
    (void)InRange(idx[s], experts, flags, kBadExpert);
    atomicAdd(counts + ExpertOf(idx, s, experts), 1ull);
  }
}

// offsets[e] = the rows of experts before e (one thread: E is at most a few thousand).
__global__ void ExpertOffsetsKernel(const int64_t* counts, int64_t experts, int64_t* offsets) {
  int64_t sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    offsets[e] = sum;
    sum += counts[e];
  }
}

// Block e walks the slots in order, blockDim.x at a time, and gives its expert's slots consecutive
// rows: a thread's rank is the hits of the warps before it plus those of the lanes before it.
__global__ void FillExpertRowsKernel(const int32_t* idx, int64_t slots, int64_t k, int64_t experts,
                                     const int64_t* offsets, int32_t* row_of_slot, int32_t* token_of_row) {
  __shared__ int warp_hits[32];
  const int e = static_cast<int>(blockIdx.x), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = static_cast<int>(blockDim.x / 32);
  int64_t next = offsets[e];
  for (int64_t start = 0; start < slots; start += blockDim.x) {
    const int64_t s = start + threadIdx.x;
    const bool hit = s < slots && ExpertOf(idx, s, experts) == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      total += warp_hits[w];
    }
    if (hit) {
      const int64_t row = next + before + __popc(ballot & ((1u << lane) - 1u));
      row_of_slot[s] = static_cast<int32_t>(row);
      token_of_row[row] = static_cast<int32_t>(s / k);
    }
    next += total;
    __syncthreads();
  }
}

template <typename T>
__global__ void PermuteBackwardKernel(const T* dxp, const int32_t* rows, T* dx, int64_t tokens, int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = 0;
    for (int64_t j = 0; j < k; ++j) s += Ld(dxp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    dx[i] = Cvt<T>(s);
  }
}

template <typename T>
__global__ void CombineForwardKernel(const T* yp, const int32_t* rows, const T* w, T* y, int64_t tokens, int64_t k, int64_t d) {
  MOE_CUDA_LOOP(i, tokens * d) {
    const int64_t t = i / d, c = i % d;
    float s = Ld(y[i]);
    for (int64_t j = 0; j < k; ++j) s += Ld(w[t * k + j]) * Ld(yp[static_cast<int64_t>(rows[t * k + j]) * d + c]);
    y[i] = Cvt<T>(s);
  }
}

// One block per (token, choice): the weight's gradient is a dot product over the row.
template <typename T>
__global__ void CombineBackwardKernel(const T* dy, const T* yp, const int32_t* rows, const T* w, T* dyp, T* dw, int64_t k,
                                      int64_t d) {
  const int64_t slot = blockIdx.x, t = slot / k;
  const int64_t row = rows[slot];
  const float wt = Ld(w[slot]);
  float dot = 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float g = Ld(dy[t * d + c]);
    dot += g * Ld(yp[row * d + c]);
    dyp[row * d + c] = Cvt<T>(wt * g);
  }
  dot = BlockSum(dot);
  if (threadIdx.x == 0) dw[slot] = Cvt<T>(dot);
}

}  // namespace

void BuildDispatchPlanOnDevice(const Tensor& topk_idx, int64_t num_experts, const Tensor& counts,
                               const Tensor& row_of_slot, const Tensor& token_of_row) {
  CheckOnCuda({&topk_idx, &counts, &row_of_slot, &token_of_row}, "BuildDispatchPlanOnDevice");
  const int64_t slots = topk_idx.numel(), k = topk_idx.dim(1);
  Tensor offsets = Tensor::Empty({num_experts}, DType::kI64, topk_idx.device());
  MOE_CHECK(cudaMemsetAsync(counts.raw(), 0, counts.nbytes(), Stream()) == cudaSuccess) << "BuildDispatchPlanOnDevice: memset";
  if (slots > 0) {
    CountExpertsKernel<<<Blocks(slots), kThreads, 0, Stream()>>>(
        Ptr<int32_t>(topk_idx), slots, num_experts, static_cast<unsigned long long*>(counts.raw()), BadIndexFlags());
  }
  ExpertOffsetsKernel<<<1, 1, 0, Stream()>>>(Ptr<int64_t>(counts), num_experts, Ptr<int64_t>(offsets));
  if (slots > 0) {
    FillExpertRowsKernel<<<static_cast<unsigned>(num_experts), kThreads, 0, Stream()>>>(
        Ptr<int32_t>(topk_idx), slots, k, num_experts, Ptr<int64_t>(offsets), Ptr<int32_t>(row_of_slot),
        Ptr<int32_t>(token_of_row));
  }
  CheckLaunch("BuildDispatchPlanOnDevice");
}

void PermuteBackward(const Tensor& dxp, const Tensor& row_of_slot, const Tensor& dx) {
  CheckOnCuda({&dxp, &row_of_slot, &dx}, "PermuteBackward");
  const int64_t tokens = dx.dim(0), k = row_of_slot.dim(1), d = dx.dim(1);
  MOE_CUDA_TYPED(StorageType({&dxp, &dx}, "PermuteBackward"), T, {
    if (tokens * d > 0) {
      PermuteBackwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(Ptr<T>(dxp), Ptr<int32_t>(row_of_slot), Ptr<T>(dx),
                                                                              tokens, k, d);
    }
  });
  CheckLaunch("PermuteBackward");
}

void CombineForward(const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& y) {
  CheckOnCuda({&yp, &row_of_slot, &w, &y}, "CombineForward");
  const int64_t tokens = y.dim(0), k = row_of_slot.dim(1), d = y.dim(1);
  MOE_CUDA_TYPED(StorageType({&yp, &w, &y}, "CombineForward"), T, {
    if (tokens * d > 0) {
      CombineForwardKernel<T><<<Blocks(tokens * d), kThreads, 0, Stream()>>>(Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w),
                                                                             Ptr<T>(y), tokens, k, d);
    }
  });
  CheckLaunch("CombineForward");
}

void CombineBackward(const Tensor& dy, const Tensor& yp, const Tensor& row_of_slot, const Tensor& w, const Tensor& dyp,
                     const Tensor& dw) {
  CheckOnCuda({&dy, &yp, &row_of_slot, &w, &dyp, &dw}, "CombineBackward");
  const int64_t tokens = dy.dim(0), k = row_of_slot.dim(1), d = dy.dim(1);
  MOE_CUDA_TYPED(StorageType({&dy, &yp, &w, &dyp, &dw}, "CombineBackward"), T, {
    if (tokens * k > 0) {
      CombineBackwardKernel<T><<<static_cast<unsigned>(tokens * k), kThreads, 0, Stream()>>>(
          Ptr<T>(dy), Ptr<T>(yp), Ptr<int32_t>(row_of_slot), Ptr<T>(w), Ptr<T>(dyp), Ptr<T>(dw), k, d);
    }
  });
  CheckLaunch("CombineBackward");
}

}  // namespace moe::kernels::cuda
