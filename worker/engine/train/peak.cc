#include "worker/engine/train/peak.h"

#include <chrono>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/runtime.h"

namespace moe::train {

PeakFlops MeasureCpuSgemmPeak(int n, double seconds) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(static_cast<size_t>(n) * n, 0.25f),
      c(static_cast<size_t>(n) * n);
  auto run = [&] {
    kernels::cpu::FastestGemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                                     c.data(), n);
  };
  run();  // warm up (threads, pages)
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  int runs = 0;
  while (runs < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / dt);
    if (++runs > 200) break;
  }
  PeakFlops p;
  p.flops_per_second = best;
  p.source = "SGEMM probe " + std::to_string(n) + "^3, " +
             kernels::CpuGemmBackendName(/*fastest=*/true) + ", " +
             std::to_string(kernels::NumThreads()) + " threads";
  return p;
}

}  // namespace moe::train
