// Device dispatch of AdamW (kernels/optimizer.h): shapes, then the CPU or CUDA path; the bucket's
// plan and its one-launch update.
#include "kernels/optimizer.h"

#include <algorithm>

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(AdamW)
MOE_CUDA_KERNEL(AdamWMulti)  // the CPU runs AdamW and Convert per segment (below)

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg) {
  MOE_CHECK(grad.numel() == param.numel() && m.numel() == param.numel() &&
            v.numel() == param.numel())
      << "AdamW shapes";
  return MOE_DISPATCH(param, AdamW(param, grad, m, v, cfg));
}

AdamWPlan MakeAdamWPlan(std::vector<AdamWSegment> segments, Device device) {
  AdamWPlan plan;
  int64_t last = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const AdamWSegment& s = segments[i];
    MOE_CHECK(s.begin >= last && s.end >= s.begin)
        << "MakeAdamWPlan: segment " << i << " [" << s.begin << ", " << s.end
        << ") is not after the one before, or ends before it begins";
    last = s.end;
    if (s.end > s.begin) plan.segments.push_back(s);
  }
  if (!device.is_cuda() || plan.segments.empty()) return plan;
  const std::vector<int64_t> table = AdamWChunkTable(plan.segments);
  plan.chunks =
      Tensor::FromVector<int64_t>(table, {static_cast<int64_t>(table.size())}).Clone(device);
  return plan;
}

std::vector<int64_t> AdamWChunkTable(const std::vector<AdamWSegment>& segments) {
  std::vector<int64_t> table;
  for (const AdamWSegment& s : segments) {
    for (int64_t at = s.begin; at < s.end; at += kAdamWChunkElements) {
      const int64_t len = std::min(kAdamWChunkElements, s.end - at);
      table.push_back(at);
      table.push_back(len << 1 | (s.decay ? 1 : 0));
    }
  }
  return table;
}

void AdamWMulti(const AdamWPlan& plan, const AdamWBuffers& b, const AdamWConfig& cfg) {
  if (plan.segments.empty()) return;  // a shard of padding alone (ZeRO on a tiny bucket)
  const int64_t end = plan.segments.back().end, first = plan.segments.front().begin;
  MOE_CHECK(first >= b.master_offset && end - b.master_offset <= b.master.numel() &&
            end <= b.grad.numel() && first >= b.moments_offset &&
            end - b.moments_offset <= b.m.numel() && b.m.numel() == b.v.numel() &&
            (!b.compute.defined() || end <= b.compute.numel()))
      << "AdamWMulti: segments [" << first << ", " << end << ") against master "
      << b.master.ShapeString() << " at " << b.master_offset << ", grad " << b.grad.ShapeString()
      << ", moments " << b.m.ShapeString() << " at " << b.moments_offset;
#ifdef MOE_WITH_CUDA
  if (b.master.device().is_cuda()) return cuda::AdamWMulti(plan, b, cfg);
#endif
  // The CPU: AdamW on each segment, then the compute copies (the passes the CUDA kernel fuses).
  for (const AdamWSegment& s : plan.segments) {
    AdamWConfig c = cfg;
    c.weight_decay = s.decay ? cfg.weight_decay : 0.0;
    AdamW(b.master.Rows(s.begin - b.master_offset, s.end - b.master_offset),
          b.grad.Rows(s.begin, s.end),
          b.m.Rows(s.begin - b.moments_offset, s.end - b.moments_offset),
          b.v.Rows(s.begin - b.moments_offset, s.end - b.moments_offset), c);
  }
  if (!b.compute.defined()) return;
  for (const AdamWSegment& s : plan.segments) {
    Convert(b.master.Rows(s.begin - b.master_offset, s.end - b.master_offset),
            b.compute.Rows(s.begin, s.end));
  }
}

}  // namespace moe::kernels
