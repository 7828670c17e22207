// The experts' grouped GEMM on Hopper through CUTLASS (its sm_90a ptr-array kernel: TMA loads,
// warp-specialised producer and consumers, wgmma), built only when CUTLASS's headers were found
// (cmake/MoeGpuLibraries.cmake: MOE_WITH_SM90A). Host-side API, no CUTLASS types: callers include
// this without CUTLASS's headers. GroupedGemmBf16 and GroupedGemmBf16DeviceCounts:
// kernels/hopper_grouped_gemm.h.
#pragma once

#include <string>

#include "kernels/hopper_grouped_gemm.h"

namespace moe::kernels::cuda::sm90a {

// The CUTLASS version this build was compiled with ("4.2.0").
std::string CutlassVersion();

}  // namespace moe::kernels::cuda::sm90a
