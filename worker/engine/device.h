// Where a rank trains: its device and precision, chosen once per process (before its communicators:
// NCCL binds to the current device) and handed to the trainer.
#pragma once

#include <string>

#include "common/status.h"
#include "kernels/runtime.h"
#include "kernels/tensor.h"

namespace moe {

struct DevicePlacement {
  Device device;                // cpu, or the CUDA device this process is bound to
  std::string name;             // "cpu", "cuda:0 (NVIDIA H200)": for logs and results
  DType compute = DType::kF32;  // the activations' dtype: bf16 in mixed precision (bf16 and fp8)
  std::string precision;  // "fp32", "bf16" or "fp8" (bf16 with the linear layers' GEMMs in FP8)
};

// The GPU a rank trains on: -1 for "cpu", rank % gpus for "cuda", N for "cuda:N"; InvalidArgument
// naming --device for anything else. (gpus <= 0 counts as one, for checking the form alone.)
StatusOr<int> CudaIndexFor(const std::string& device, int rank, int gpus);

// Checks the --precision form: "", "fp32", "bf16" or "fp8".
Status CheckPrecision(const std::string& precision);

// Resolves `device` ("cpu", "cuda", "cuda:N") and `precision` ("" for the device's default: bf16 on
// CUDA, fp32 on CPU) for `rank`, and binds the CUDA device. FAILED_PRECONDITION when this machine
// or build has no usable GPU, naming the device.
StatusOr<DevicePlacement> PlaceRank(const std::string& device, const std::string& precision,
                                    int rank);

// Counts a host read of `t` on the CPU stand-in (a CUDA tensor's read is counted by its copy).
inline void CountCpuStandInRead(const Tensor& t) {
  if (t.device().is_cpu()) kernels::CountHostSync();
}

}  // namespace moe
