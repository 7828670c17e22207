// What a training step asks of the GPU, from CUPTI's activity records (tests/gpu/perf.sh's
// "launches per step" rows): every kernel that ran (ours, cuBLAS's, cuDNN's, CUTLASS's), the sum of
// their device times, and the bytes copied host to device and back. libcupti is loaded at run time
// (the toolkit's on the GPU machine: extras/CUPTI/lib64), so a program that uses this runs where it
// is missing and says why.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace moe::bench {

struct TraceCounts {
  int64_t kernels = 0;        // kernels completed
  double kernel_seconds = 0;  // their device times, summed (kernels on two streams both count)
  int64_t copies = 0;         // memory copies (any direction)
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  std::string incomplete;  // why the counts miss records, when they do
};

class KernelTrace {
 public:
  // Starts recording kernels and copies on every device; null (and why in *problem) without
  // libcupti, without CUDA in this build, or when CUPTI refuses. One trace at a time.
  static std::unique_ptr<KernelTrace> Start(std::string* problem);
  ~KernelTrace();  // stops recording
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // What completed since Start or the last Take. Call once the device is idle (after a
  // synchronisation): records of work still running come with a later Take.
  TraceCounts Take();

 private:
  KernelTrace() = default;
};

}  // namespace moe::bench
