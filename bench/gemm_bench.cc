// The reproducible built-in GEMM (training.deterministic on CPU: every element the same FMA chain
// whatever the matrix size, position and thread count) against OpenBLAS, the machine's fastest
// SGEMM, on the same inputs in the same run: square 1024^3 and the shapes the tiny job's layers run
// (1,024 tokens of hidden 128: a projection, the dense FFN's gate|up, an expert's rows, the weight
// gradient of each). Prints each one's GFLOP/s and the ratio built-in / OpenBLAS (best of --reps).
//
//   moe-bench-gemm [--reps 5] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/args.h"
#include "kernels/gemm.h"
#include "kernels/runtime.h"

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
};

template <typename Fn>
double BestSeconds(int reps, Fn&& fn) {
  fn();  // warm up (threads, pages)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 5, threads = 0;
  moe::ArgParser args("moe-bench-gemm",
                      "The reproducible built-in GEMM against OpenBLAS on the engine's shapes.");
  args.AddInt("reps", &reps, "timed calls of each GEMM per shape (best kept)");
  args.AddInt("threads", &threads, "CPU threads (default: all cores)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  moe::kernels::SetNumThreads(static_cast<int>(threads));
  const std::vector<Shape> shapes = {
      {"square 1024^3", false, false, 1024, 1024, 1024},
      {"x W^T (1024 x 128 -> 384)", false, true, 1024, 384, 128},
      {"x W^T (1024 x 384 -> 128)", false, true, 1024, 128, 384},
      {"expert rows (256 x 128 -> 256)", false, true, 256, 256, 128},
      {"dW = dy^T x (384 x 128 over 1024)", true, false, 384, 128, 1024},
      {"dx = dy W (1024 x 384 -> 128)", false, false, 1024, 128, 384},
      {"1024 x 1000 x 1000", false, false, 1024, 1000, 1000},
  };
  std::printf("%-36s %12s %12s %8s   (%s, %d threads)\n", "shape", "built-in", "OpenBLAS", "ratio",
              moe::kernels::CpuGemmBackendName(true).c_str(), moe::kernels::NumThreads());
  double worst = 1e30;
  for (const Shape& s : shapes) {
    const int64_t rows_a = s.ta ? s.k : s.m, cols_a = s.ta ? s.m : s.k;
    const int64_t rows_b = s.tb ? s.n : s.k, cols_b = s.tb ? s.k : s.n;
    std::vector<float> a(static_cast<size_t>(rows_a * cols_a)),
        b(static_cast<size_t>(rows_b * cols_b)), c(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const double built_in = BestSeconds(static_cast<int>(reps), [&] {
      moe::kernels::cpu::BlockedGemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), cols_a,
                                            b.data(), cols_b, 0.0f, c.data(), s.n);
    });
    const double blas = BestSeconds(static_cast<int>(reps), [&] {
      moe::kernels::cpu::FastestGemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), cols_a,
                                            b.data(), cols_b, 0.0f, c.data(), s.n);
    });
    const double ratio = blas / built_in;
    worst = std::min(worst, ratio);
    std::printf("%-36s %9.1f GF %9.1f GF %7.2fx\n", s.name, flops / built_in * 1e-9,
                flops / blas * 1e-9, ratio);
  }
  std::printf("RESULT reproducible_gemm_vs_openblas_worst %.3f\n", worst);
  return 0;
}
