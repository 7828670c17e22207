#include "worker/engine/device.h"

#include <algorithm>

#include "common/check.h"
#include "kernels/runtime.h"

namespace moe {

StatusOr<int> CudaIndexFor(const std::string& device, int rank, int gpus) {
  if (device == "cpu") return -1;
  if (device == "cuda") return rank % std::max(gpus, 1);
  const std::string digits = device.rfind("cuda:", 0) == 0 ? device.substr(5) : "";
  if (digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError("--device: '" + device + "' is not cpu, cuda or cuda:N");
  }
  return std::stoi(digits);
}

Status CheckPrecision(const std::string& precision) {
  if (precision.empty() || precision == "fp32" || precision == "bf16" || precision == "fp8")
    return OkStatus();
  return InvalidArgumentError("--precision: '" + precision + "' is not fp32, bf16 or fp8");
}

namespace {

StatusOr<DevicePlacement> PlaceOnGpu(const std::string& want, int rank) {
  if (!kernels::HaveCuda())
    return FailedPreconditionError("device " + want +
                                   ": this build of the engine has no CUDA kernels");
  std::string problem;
  const int count = kernels::CudaDeviceCount(&problem);
  if (count == 0) {
    return FailedPreconditionError("device " + want + ": this machine has no usable CUDA device" +
                                   (problem.empty() ? "" : " (" + problem + ")"));
  }
  MOE_ASSIGN_OR_RETURN(const int index, CudaIndexFor(want, rank, count));
  MOE_RETURN_IF_ERROR(kernels::UseCudaDevice(index));
  DevicePlacement p;
  p.device = Device::Cuda(index);
  p.name = p.device.ToString() + " (" + kernels::CudaDeviceName(index) + ")";
  return p;
}

}  // namespace

StatusOr<DevicePlacement> PlaceRank(const std::string& device, const std::string& precision,
                                    int rank) {
  MOE_RETURN_IF_ERROR(CheckPrecision(precision));
  MOE_ASSIGN_OR_RETURN(const int form,
                       CudaIndexFor(device, 0, 1));  // the form first: a clear error anywhere
  DevicePlacement p;
  if (form < 0) {
    p.device = Device::Cpu();
    p.name = "cpu";
  } else {
    MOE_ASSIGN_OR_RETURN(p, PlaceOnGpu(device, rank));
  }
  p.precision = precision.empty() ? (p.device.is_cuda() ? "bf16" : "fp32") : precision;
  p.compute =
      p.precision == "fp32" ? DType::kF32 : DType::kBF16;  // fp8: bf16 activations, FP8 GEMM inputs
  return p;
}

}  // namespace moe
