// The MoE routing plan's kernels behind kernels/cuda/permute.cu's BuildDispatchPlanOnDevice: a
// stable counting sort of the T x k slots by expert, equal to the host reference (kernels/permute.h
// BuildDispatchPlan).
//   CountExpertsKernel     a histogram per block in shared memory, added to the counts with
//   atomics. FillExpertRowsKernel   one block per expert. It finds its first row (the counts of the
//   experts
//                          before it, summed by the block), then walks the slots in order, kItems x
//                          blockDim at a time: the loads of a pass are independent (latency
//                          hidden), each (item, warp) pair's hits counted by a ballot, and a hit's
//                          row is the hits of the pairs before it plus those of the lanes before
//                          it.
// An expert id out of range is recorded in *flags and counted as expert 0 by both kernels, so the
// plan stays a permutation and what follows reads in bounds; the step fails at its read.
//
// nvcc compiles these; a host compiler compiles them under tests/gpu/cuda_emulator.h, which
// supplies the primitives below (ctest gpu_routing_emulated runs them on the CPU against the host
// plan).
#pragma once

#include <cstdint>

#include "kernels/cuda/mma.cuh"  // MOE_DEVICE, MOE_DYNAMIC_SMEM, and the emulator's guard

namespace moe::kernels::cuda::routing {

constexpr int kItems = 8;              // slots per thread per pass of the fill kernel
constexpr unsigned kBadExpertBit = 8;  // kernels/runtime.h kBadExpert (checked in permute.cu)

#if defined(__CUDACC__)
MOE_DEVICE unsigned Ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
MOE_DEVICE int PopCount(unsigned x) { return __popc(x); }
MOE_DEVICE void AtomicAdd(unsigned* p, unsigned v) { atomicAdd(p, v); }
MOE_DEVICE void AtomicAdd(unsigned long long* p, unsigned long long v) { atomicAdd(p, v); }
MOE_DEVICE void AtomicOr(unsigned* p, unsigned v) { atomicOr(p, v); }
#endif

// The fill kernel's shared memory for a block of `threads`.
inline size_t FillSharedBytes(int threads) {
  return sizeof(long long) * static_cast<size_t>(threads) +
         sizeof(int) * kItems * static_cast<size_t>(threads / 32);
}

MOE_DEVICE int ExpertOf(int32_t e, int64_t experts) { return e >= 0 && e < experts ? e : 0; }

// The kernels have internal linkage: one translation unit includes them (permute.cu, or the test).
namespace {

// Shared memory: the block's histogram, `experts` unsigned ints.
__global__ void CountExpertsKernel(const int32_t* idx, int64_t slots, int64_t experts,
                                   unsigned long long* counts, unsigned* flags) {
  MOE_DYNAMIC_SMEM(smem);
  auto* hist = reinterpret_cast<unsigned*>(smem);
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < slots;
       s += stride) {
    const int32_t e = idx[s];
    if (e < 0 || e >= experts) AtomicOr(flags, kBadExpertBit);
    AtomicAdd(hist + ExpertOf(e, experts), 1u);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    if (hist[e] != 0) AtomicAdd(counts + e, static_cast<unsigned long long>(hist[e]));
  }
}

// Shared memory: FillSharedBytes(blockDim.x). blockDim.x a multiple of 32.
__global__ void FillExpertRowsKernel(const int32_t* idx, int64_t slots, int64_t k, int64_t experts,
                                     const unsigned long long* counts, int32_t* row_of_slot,
                                     int32_t* token_of_row) {
  MOE_DYNAMIC_SMEM(smem);
  auto* partial = reinterpret_cast<long long*>(smem);
  int* hits = reinterpret_cast<int*>(partial + blockDim.x);  // [kItems][warps]
  const int e = static_cast<int>(blockIdx.x), tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, warps = static_cast<int>(blockDim.x) / 32;
  long long sum = 0;
  for (int j = tid; j < e; j += static_cast<int>(blockDim.x))
    sum += static_cast<long long>(counts[j]);
  partial[tid] = sum;
  __syncthreads();
  long long next = 0;  // this expert's next row
  for (int t = 0; t < static_cast<int>(blockDim.x); ++t) next += partial[t];
  const int64_t pass = static_cast<int64_t>(blockDim.x) * kItems;
  for (int64_t start = 0; start < slots; start += pass) {
    bool hit[kItems];
    for (int i = 0; i < kItems; ++i) {
      const int64_t s = start + static_cast<int64_t>(i) * blockDim.x + tid;
      hit[i] = s < slots && ExpertOf(idx[s], experts) == e;
    }
    unsigned ballot[kItems];
    for (int i = 0; i < kItems; ++i) {
      ballot[i] = Ballot(hit[i]);
      if (lane == 0) hits[i * warps + warp] = PopCount(ballot[i]);
    }
    __syncthreads();
    int before[kItems],
        total = 0;  // hits of the (item, warp) pairs ahead of this thread's, in slot order
    for (int i = 0; i < kItems; ++i) {
      for (int w = 0; w < warps; ++w) {
        if (w == warp) before[i] = total;
        total += hits[i * warps + w];
      }
    }
    for (int i = 0; i < kItems; ++i) {
      if (!hit[i]) continue;
      const int64_t s = start + static_cast<int64_t>(i) * blockDim.x + tid;
      const long long row = next + before[i] + PopCount(ballot[i] & ((1u << lane) - 1u));
      row_of_slot[s] = static_cast<int32_t>(row);
      token_of_row[row] = static_cast<int32_t>(s / k);
    }
    next += total;
    __syncthreads();  // hits is rewritten by the next pass
  }
}

}  // namespace

}  // namespace moe::kernels::cuda::routing
