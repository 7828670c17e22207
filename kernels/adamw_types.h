// The types of the bucket-wide AdamW (kernels/optimizer.h AdamWMulti), apart from its family header
// so that the CUDA backend defines its twin from them (kernels/dispatch.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace moe::kernels {

// A segment: elements [begin, end) of the flat buffer, decayed (cfg.weight_decay) or not (0).
struct AdamWSegment {
  int64_t begin = 0, end = 0;
  bool decay = true;
};
// The segments with their launch table, built once for a bucket (its layout does not change): on
// CUDA the table of chunks lives on the device, so a step uploads nothing.
struct AdamWPlan {
  std::vector<AdamWSegment> segments;
  Tensor chunks;  // CUDA: i64 [2 x chunks] (first element, length << 1 | decay); CPU: undefined
};
// The bucket: element e of a segment updates master[e - master_offset], m and v[e -
// moments_offset] from grad[e], then (when compute is defined) writes the new master value to
// compute[e], rounded to compute's dtype. The values of AdamW on each segment followed by Convert,
// bit for bit.
struct AdamWBuffers {
  Tensor master, grad, m, v, compute;
  int64_t master_offset = 0, moments_offset = 0;
};

}  // namespace moe::kernels
