// The reproducible built-in GEMM (training.deterministic on CPU: every element the same FMA chain
// whatever the matrix size, position, thread count and ISA) against OpenBLAS, the machine's fastest
// SGEMM, on the same inputs in the same run: the GEMMs the `small` and `tiny` presets' layers run
// (a step's 2,048 tokens: projections, the dense FFN, an expert's rows, the head, and the
// backward's data and weight gradients) and square 1024^3 with 1 and 2 threads. The two alternate,
// call by call, and each keeps its best of --reps (a shared machine's noise lands on both). Prints
// each one's GFLOP/s and, per shape, RESULT reproducible_over_openblas_<shape> (built-in / OpenBLAS
// speed; the goal is >= 0.9 everywhere), then the deterministic accumulation's cost: the weight
// gradient added to an f64 accumulator in the GEMM's epilogue against the GEMM alone.
//
//   moe-bench-gemm [--reps 5] [--threads T] [--isa avx512|avx2|scalar]
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
  const char* name;  // RESULT's suffix
  const char* what;
  bool ta, tb;
  int64_t m, n, k;
  int threads;  // 0: --threads
};

// A step's tokens at both presets (4 x 512 at small, 8 x 256 a rank at tiny's demo); an expert's
// rows are tokens x top_k / experts.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {"square_1024_t1", "square 1024^3, 1 thread", false, false, 1024, 1024, 1024, 1},
      {"square_1024_t2", "square 1024^3, 2 threads", false, false, 1024, 1024, 1024, 2},
      {"small_attn_proj", "small x W^T 2048 x 1024 -> 1024", false, true, 2048, 1024, 1024, 0},
      {"small_ffn_w13", "small x W13^T 2048 x 1024 -> 5632", false, true, 2048, 5632, 1024, 0},
      {"small_ffn_w2", "small h W2^T 2048 x 2816 -> 1024", false, true, 2048, 1024, 2816, 0},
      {"small_expert_w13", "small expert 512 x 1024 -> 1024", false, true, 512, 1024, 1024, 0},
      {"small_expert_w2", "small expert 512 x 512 -> 1024", false, true, 512, 1024, 512, 0},
      {"small_head", "small head 2048 x 1024 -> 8192", false, true, 2048, 8192, 1024, 0},
      {"small_dgrad", "small dx = dy W 2048 x 5632 -> 1024", false, false, 2048, 1024, 5632, 0},
      {"small_wgrad", "small dW = dy^T x 5632 x 1024 / 2048", true, false, 5632, 1024, 2048, 0},
      {"small_expert_wgrad", "small expert dW 1024 x 1024 / 512", true, false, 1024, 1024, 512, 0},
      {"tiny_proj", "tiny x W^T 2048 x 128 -> 128", false, true, 2048, 128, 128, 0},
      {"tiny_mla_kv_a", "tiny MLA kv_a 2048 x 128 -> 48", false, true, 2048, 48, 128, 0},
      {"tiny_ffn_w13", "tiny x W13^T 2048 x 128 -> 768", false, true, 2048, 768, 128, 0},
      {"tiny_expert_w13", "tiny expert 512 x 128 -> 256", false, true, 512, 256, 128, 0},
      {"tiny_head", "tiny head 2048 x 128 -> 2048", false, true, 2048, 2048, 128, 0},
      {"tiny_dgrad", "tiny dx = dy W 2048 x 768 -> 128", false, false, 2048, 128, 768, 0},
      {"tiny_wgrad", "tiny dW = dy^T x 768 x 128 / 2048", true, false, 768, 128, 2048, 0},
      {"tiny_expert_wgrad", "tiny expert dW 256 x 128 / 512", true, false, 256, 128, 512, 0},
  };
  return shapes;
}

double Seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best times of two functions called alternately, after a warm-up call of each.
template <typename A, typename B>
std::pair<double, double> BestOfAlternating(int reps, A&& a, B&& b) {
  a();
  b();
  double best_a = 1e30, best_b = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    a();
    best_a = std::min(best_a, Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    b();
    best_b = std::min(best_b, Seconds(t0));
  }
  return {best_a, best_b};
}

struct Operands {
  int64_t lda, ldb;
  std::vector<float> a, b, c;
  std::vector<double> acc;
};

Operands Make(const Shape& s) {
  Operands o;
  const int64_t rows_a = s.ta ? s.k : s.m, rows_b = s.tb ? s.n : s.k;
  o.lda = s.ta ? s.m : s.k;
  o.ldb = s.tb ? s.k : s.n;
  o.a.resize(static_cast<size_t>(rows_a * o.lda));
  o.b.resize(static_cast<size_t>(rows_b * o.ldb));
  o.c.resize(static_cast<size_t>(s.m * s.n));
  o.acc.assign(o.c.size(), 0.0);
  for (size_t i = 0; i < o.a.size(); ++i)
    o.a[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < o.b.size(); ++i)
    o.b[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 5, threads = 0;
  std::string isa;
  moe::ArgParser args("moe-bench-gemm",
                      "The reproducible built-in GEMM against OpenBLAS on the engine's shapes.");
  args.AddInt("reps", &reps, "timed calls of each GEMM per shape (best kept)");
  args.AddInt("threads", &threads, "CPU threads of the engine's shapes (default: all cores)");
  args.AddString("isa", &isa,
                 "the built-in GEMM's tiles: avx512, avx2 or scalar (default: widest)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (reps < 1) {
    std::fprintf(stderr, "--reps: must be at least 1, got %lld\n", static_cast<long long>(reps));
    return 2;
  }
  if (!moe::kernels::cpu::SetBlockedGemmIsa(isa)) {
    std::fprintf(stderr, "--isa: '%s' is not built in or this CPU lacks it\n", isa.c_str());
    return 2;
  }
  moe::kernels::SetNumThreads(static_cast<int>(threads));
  const int default_threads = moe::kernels::NumThreads();
  std::printf("built-in tiles %s; %s\n", moe::kernels::cpu::BlockedGemmIsa().c_str(),
              moe::kernels::CpuGemmBackendName(true).c_str());
  std::printf("%-40s %3s %12s %12s %8s\n", "shape (M x K -> N; dW: M x N over K)", "thr",
              "built-in", "OpenBLAS", "ratio");
  double worst = 1e30, acc_worst = 1e30;
  for (const Shape& s : Shapes()) {
    moe::kernels::SetNumThreads(s.threads > 0 ? s.threads : default_threads);
    Operands o = Make(s);
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const auto [built_in, blas] = BestOfAlternating(
        static_cast<int>(reps),
        [&] {
          moe::kernels::cpu::BlockedGemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda,
                                                o.b.data(), o.ldb, 0.0f, o.c.data(), s.n);
        },
        [&] {
          moe::kernels::cpu::FastestGemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda,
                                                o.b.data(), o.ldb, 0.0f, o.c.data(), s.n);
        });
    const double ratio = blas / built_in;
    worst = std::min(worst, ratio);
    std::printf("%-40s %3d %9.1f GF %9.1f GF %7.2fx\n", s.what, moe::kernels::NumThreads(),
                flops / built_in * 1e-9, flops / blas * 1e-9, ratio);
    std::printf("RESULT reproducible_over_openblas_%s %.3f\n", s.name, ratio);
    if (!s.ta) continue;
    // Weight gradients: the f64 accumulation in the epilogue against the plain GEMM.
    const auto [accumulate, plain] = BestOfAlternating(
        static_cast<int>(reps),
        [&] {
          moe::kernels::cpu::BlockedGemmAccumulate<float>(
              s.ta, s.tb, s.m, s.n, s.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.acc.data(), s.n);
        },
        [&] {
          moe::kernels::cpu::BlockedGemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda,
                                                o.b.data(), o.ldb, 0.0f, o.c.data(), s.n);
        });
    acc_worst = std::min(acc_worst, plain / accumulate);
    std::printf("%-40s     into f64: %.1f GF, %.2fx the plain GEMM's speed\n", "",
                flops / accumulate * 1e-9, plain / accumulate);
  }
  std::printf("RESULT reproducible_gemm_vs_openblas_worst %.3f\n", worst);
  std::printf("RESULT f64_accumulate_over_plain_gemm_worst %.3f\n", acc_worst);
  return 0;
}
