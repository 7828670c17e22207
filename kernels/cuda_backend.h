// What the CUDA backend offers the device dispatch beyond the families' entry points (those are
// declared once, in kernels/<family>.h, and reach this backend through kernels/dispatch.h).
// Declared at the dispatch layer and defined in kernels/cuda/ (runtime.cu, fp8_gemm.cu), so that no
// include points from the dispatch down into a backend's folder (scripts/layers.sh). Plain C++ (no
// CUDA headers), so the dispatch files include it in every build; without CUDA nothing calls it.
#pragma once

#include <string>

#include "kernels/tensor.h"

namespace moe::kernels::cuda {

// While one is alive on this thread, the families' host sums (the losses' row partials, the sum of
// squares) add their total into *dst on the device instead, in double (in order up to 32 partials,
// by one block's fixed tree above: the same bits every run), and return 0: no host read
// (kernels/dispatch.h AddToSlot).
class DeviceSumTarget {
 public:
  explicit DeviceSumTarget(double* dst);
  ~DeviceSumTarget();
  DeviceSumTarget(const DeviceSumTarget&) = delete;
  DeviceSumTarget& operator=(const DeviceSumTarget&) = delete;

 private:
  double* previous_;
};

// runtime.cu: tensor memory on DeviceType::kCuda through the caching allocator (idempotent), and
// the device this thread runs on.
void RegisterCudaAllocator();
Device CurrentDevice();

// fp8_gemm.cu: "" when this device can run cuBLASLt's block-scaled FP8 GEMMs, else why not (once
// per process; kernels/fp8.h Fp8GemmSupport). Checks the card and cuBLASLt only; kernels/fp8.cc
// then checks the GEMMs against the emulation.
std::string Fp8GemmProblem();
// The three GEMMs of kernels/fp8.h without the entry points' aborts: "" or what failed (that
// check).
enum class Fp8GemmKind { kForward, kDgrad, kWgrad };
std::string TryFp8Gemm(Fp8GemmKind which, const Tensor& a, const Tensor& b, const Tensor& out,
                       float beta);

// gemm.cu: GroupedGemmDeviceCounts's device path (kernels/gemm.h), false where it cannot take
// the call (said once per reason), the dispatch then reading the counts.
bool GroupedGemmOnDeviceCounts(const Tensor& x, const Tensor& w, const Tensor& counts,
                               const Tensor& y);

}  // namespace moe::kernels::cuda
