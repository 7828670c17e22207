// The GPU benchmarks' device (bench/gpu_bench.cc, bench/slice_bench.cc): cuda:0 made this process's
// device, or why not, as the GPU scripts read it.
#pragma once

#include <cstdio>
#include <string>

#include "kernels/runtime.h"

namespace moe::bench {

// 0 once cuda:0 is this process's device; otherwise what the program exits with, having said why:
// 77 (a skip) where there is no GPU, 1 where CUDA is there and fails.
inline int UseFirstCudaDevice(const char* program) {
  std::string problem;
  if (kernels::CudaDeviceCount(&problem) == 0) {
    std::printf("%s\n", problem.empty() ? "SKIPPED: no CUDA device here"
                                        : ("FAIL: CUDA does not work here: " + problem).c_str());
    return problem.empty() ? 77 : 1;
  }
  if (Status st = kernels::UseCudaDevice(0); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace moe::bench
