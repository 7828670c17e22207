// Causal attention forward+backward on the CPU: the tiled (flash-style) kernel against the
// materialised textbook path (kernels/attention_materialized.h) on the same inputs in the same run,
// at B = 1 and S = 1024 and 4096, MLA's shapes (16 heads, d_qk 192, d_v 128) and MHA's (16 heads,
// 64/64), fp32. Prints the time ratio (flash / materialised), each path's useful causal FLOP/s
// against the SGEMM peak measured in the same run, and the bytes each keeps for the backward (and
// the [S, S] scratch the materialised backward allocates). Best of --reps calls of each,
// alternating flash and materialised: the first call of each path pays for its page faults, the
// later ones find their buffers in the caching allocator.
//
//   moe-bench-attention [--seqs 1024,4096] [--reps 2] [--threads T]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/log.h"
#include "kernels/attention.h"
#include "kernels/attention_materialized.h"
#include "kernels/runtime.h"
#include "worker/engine/train/peak.h"

namespace {

using moe::DType;
using moe::Tensor;

struct Shape {
  const char* name;
  int64_t heads, dqk, dv;
};

struct Inputs {
  int64_t seq = 0;
  Shape shape{};
  double scale = 1;
  Tensor q, k, v, dout;
};

// The outcome of one path at one shape: best seconds of forward+backward, bytes kept for the
// backward beyond q, k, v and out (lse or P), bytes of [S, S] scratch the backward allocates.
struct PathResult {
  double seconds = 0;
  double kept_bytes = 0;
  double scratch_bytes = 0;
};

Tensor Filled(const Tensor::Shape& shape, uint64_t seed) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  float* p = t.data<float>();
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {  // xorshift, uniform in [-1, 1)
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<float>(static_cast<double>(x >> 11) / 4503599627370496.0 - 1.0);
  }
  return t;
}

Inputs MakeInputs(int64_t seq, const Shape& s) {
  Inputs in;
  in.seq = seq;
  in.shape = s;
  in.scale = 1.0 / std::sqrt(static_cast<double>(s.dqk));
  in.q = Filled({seq, s.heads * s.dqk}, 1);
  in.k = Filled({seq, s.heads * s.dqk}, 2);
  in.v = Filled({seq, s.heads * s.dv}, 3);
  in.dout = Filled({seq, s.heads * s.dv}, 4);
  return in;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One forward+backward of the tiled kernel; what it keeps is each row's log-sum-exp.
PathResult FlashOnce(const Inputs& in) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t h = in.shape.heads;
  Tensor out = Tensor::Empty(in.v.shape(), DType::kF32),
         lse = Tensor::Empty({h * in.seq}, DType::kF32);
  moe::kernels::AttentionForward(in.q, in.k, in.v, 1, in.seq, h, in.scale, out, lse);
  Tensor dq = Tensor::Empty(in.q.shape(), DType::kF32),
         dk = Tensor::Empty(in.k.shape(), DType::kF32);
  Tensor dv = Tensor::Empty(in.v.shape(), DType::kF32);
  moe::kernels::AttentionBackward(in.q, in.k, in.v, out, in.dout, lse, 1, in.seq, h, in.scale, dq,
                                  dk, dv);
  return {Seconds(t0), static_cast<double>(lse.nbytes()), 0};
}

// One forward+backward of the materialised path; it keeps P and its backward allocates dP/dS.
PathResult MaterializedOnce(const Inputs& in) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t h = in.shape.heads;
  Tensor out = Tensor::Empty(in.v.shape(), DType::kF32),
         probs = Tensor::Empty({h, in.seq, in.seq}, DType::kF32);
  moe::kernels::MaterializedAttentionForward(in.q, in.k, in.v, 1, in.seq, h, in.scale, out, probs);
  Tensor dq = Tensor::Empty(in.q.shape(), DType::kF32),
         dk = Tensor::Empty(in.k.shape(), DType::kF32);
  Tensor dv = Tensor::Empty(in.v.shape(), DType::kF32);
  moe::kernels::MaterializedAttentionBackward(in.q, in.k, in.v, probs, in.dout, 1, in.seq, h,
                                              in.scale, dq, dk, dv);
  return {Seconds(t0), static_cast<double>(probs.nbytes()), static_cast<double>(probs.nbytes())};
}

// Best of `reps` calls of each path, the two alternating so that both see the same load on a shared
// machine.
struct Pair {
  PathResult flash, materialized;
};

Pair Best(const Inputs& in, int64_t reps) {
  Pair best{FlashOnce(in), MaterializedOnce(in)};
  for (int64_t r = 1; r < reps; ++r) {
    const PathResult f = FlashOnce(in), m = MaterializedOnce(in);
    if (f.seconds < best.flash.seconds) best.flash = f;
    if (m.seconds < best.materialized.seconds) best.materialized = m;
  }
  return best;
}

std::string Bytes(double b) {
  char buf[32];
  if (b >= 1 << 30)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  return buf;
}

// Useful causal FLOPs of forward+backward: the forward's two products over the lower triangle
// (S^2/2 x (dqk + dv) multiply-adds per head), the backward twice that.
double CausalFlops(const Inputs& in) {
  return 3.0 * static_cast<double>(in.shape.heads) * static_cast<double>(in.seq * in.seq) *
         static_cast<double>(in.shape.dqk + in.shape.dv);
}

void Report(const Inputs& in, const PathResult& flash, const PathResult& mat, double peak) {
  const double f = CausalFlops(in);
  std::printf(
      "%-4s S=%-5lld H=%lld dqk=%lld dv=%lld | flash %8.3f s (%5.1f%% of peak), keeps %-10s | "
      "materialised %8.3f s "
      "(%5.1f%% of peak), keeps %-10s + %s dP/dS in its backward\n",
      in.shape.name, static_cast<long long>(in.seq), static_cast<long long>(in.shape.heads),
      static_cast<long long>(in.shape.dqk), static_cast<long long>(in.shape.dv), flash.seconds,
      100 * f / flash.seconds / peak, Bytes(flash.kept_bytes).c_str(), mat.seconds,
      100 * f / mat.seconds / peak, Bytes(mat.kept_bytes).c_str(),
      Bytes(mat.scratch_bytes).c_str());
  std::printf(
      "RESULT attention_%s_s%lld_flash_over_materialized_time %.3f (kept bytes ratio %.2e)\n",
      in.shape.name, static_cast<long long>(in.seq), flash.seconds / mat.seconds,
      flash.kept_bytes / mat.kept_bytes);
}

std::vector<int64_t> ParseSeqs(const std::string& list) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(std::stoll(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string seqs = "1024,4096";
  int64_t reps = 2, threads = 0;
  moe::ArgParser args("moe-bench-attention",
                      "Causal attention fwd+bwd on the CPU: flash-style against materialised.");
  args.AddString("seqs", &seqs, "sequence lengths, comma-separated (default 1024,4096)");
  args.AddInt("reps", &reps, "calls per path and shape; the best is reported (default 2)");
  args.AddInt("threads", &threads, "CPU threads (default: all cores)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  std::vector<int64_t> lengths;
  try {
    lengths = ParseSeqs(seqs);
  } catch (const std::exception&) {
    std::fprintf(stderr, "--seqs: expected comma-separated lengths, got '%s'\n", seqs.c_str());
    return 2;
  }
  if (reps < 1 || lengths.empty() || *std::min_element(lengths.begin(), lengths.end()) < 1) {
    std::fprintf(stderr, "--reps and every --seqs length must be >= 1\n");
    return 2;
  }
  moe::kernels::SetNumThreads(static_cast<int>(threads));
  moe::SetLogLevel(moe::LogLevel::kWarning);
  const moe::train::PeakFlops peak = moe::train::MeasureCpuSgemmPeak(1024, 1.0);
  std::printf(
      "causal attention fwd+bwd, B=1, fp32, %d threads, best of %lld; SGEMM peak (same run) %.1f "
      "GFLOP/s (%s)\n",
      moe::kernels::NumThreads(), static_cast<long long>(reps), peak.flops_per_second / 1e9,
      peak.source.c_str());
  std::printf(
      "keeps: what the backward needs beyond q, k, v and out (flash: lse [H*S]; materialised: P "
      "[H, S, S])\n");
  for (const int64_t seq : lengths) {
    for (const Shape& s : {Shape{"mla", 16, 192, 128}, Shape{"mha", 16, 64, 64}}) {
      const Inputs in = MakeInputs(seq, s);
      const Pair best = Best(in, reps);
      Report(in, best.flash, best.materialized, peak.flops_per_second);
    }
  }
  return 0;
}
