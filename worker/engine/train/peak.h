// The peak a device's MFU is measured against. On CPU there is no datasheet figure worth quoting,
// so it is measured: SGEMM through the same BLAS and thread count the training uses.
#pragma once

#include <string>

namespace moe::train {

struct PeakFlops {
  double flops_per_second = 0;
  std::string source;  // e.g. "SGEMM probe 2048^3, OpenBLAS (...), 2 threads"
};

// Best of several runs of an n^3 SGEMM over about `seconds` of wall time.
PeakFlops MeasureCpuSgemmPeak(int n = 1024, double seconds = 0.5);

}  // namespace moe::train
