// AdamW with decoupled weight decay, fused over one parameter tensor or a flat bucket of them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/adamw_types.h"
#include "kernels/kernel_types.h"
#include "kernels/tensor.h"

namespace moe::kernels {

//   param, grad: same shape, fp32 (f64 on the CPU for gradient checks). m and v (updated) are fp32,
//   or bf16 (DeepSeek-V3's BF16 moments: the update reads and computes in fp32 and rounds what it
//   stores).
void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg);

// AdamW over the parameters of one flat buffer (the optimizer's buckets) in one pass: one launch on
// CUDA for the whole bucket, in place of a launch per parameter and a master-to-compute pass.
//
// The segments, plan and buffers: kernels/adamw_types.h.
// Segments in order, disjoint (an empty one is dropped); a segment out of order fails, named.
AdamWPlan MakeAdamWPlan(std::vector<AdamWSegment> segments, Device device);
// The launch table of those segments (AdamWPlan::chunks on the host): each cut into chunks of at
// most kAdamWChunkElements, two words a chunk.
std::vector<int64_t> AdamWChunkTable(const std::vector<AdamWSegment>& segments);
void AdamWMulti(const AdamWPlan& plan, const AdamWBuffers& b, const AdamWConfig& cfg);

}  // namespace moe::kernels
