// The CUDA attention kernels (kernels/cuda/attention_kernels.cuh), run on the CPU by the CUDA
// emulator (cuda_emulator.h) through the same launch logic as attention.cu, against a plain
// double-precision causal attention: forward (out, lse) and backward (dq, dk, dv), fp32 (3xTF32)
// and bf16 storage, every compiled head shape, awkward sizes (partial tiles, S = 1, head sizes that
// are multiples of 8 but not of 16, batches). Outputs start as NaN, so an element never written
// fails. This checks the kernels' logic where there is no GPU; the GPU itself runs them in
// gpu_kernel_check (tests/gpu/check.sh). Tolerances: fp32 |x - ref| <= 1e-5 + 1e-4 |ref| (forward)
// and 1e-5 + 1e-3 |ref| (backward); bf16 max |x - ref| <= 1e-2 max |ref|.
#include "tests/gpu/cuda_emulator.h"
// The kernels after the emulator, which supplies their primitives.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/attention_kernels.cuh"

namespace {

namespace attn = moe::kernels::cuda::attn;
using bf16 = __nv_bfloat16;

struct Case {
  bool bf16;
  int batch, seq, heads, d_qk, d_v;
};

struct Problem {
  Case c;
  double scale;
  std::vector<double> q, k, v, dout;  // values as stored (bf16-rounded for bf16 cases)
};

// The exact attention of one problem, in double: out, lse, dq, dk, dv (dq etc. for dout).
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

double Rounded(double x, bool to_bf16) {
  return to_bf16 ? __bfloat162float(__float2bfloat16_rn(static_cast<float>(x)))
                 : static_cast<float>(x);
}

Problem MakeProblem(const Case& c, uint32_t seed) {
  Problem p{c, 0.9 / std::sqrt(static_cast<double>(c.d_qk)), {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  const size_t t = static_cast<size_t>(c.batch) * c.seq;
  auto fill = [&](std::vector<double>& x, size_t n, double amp) {
    x.resize(n);
    for (auto& e : x) e = Rounded(amp * uni(rng), c.bf16);
  };
  fill(p.q, t * c.heads * c.d_qk, 2.0);  // scores of a few units: a peaked softmax, not a flat one
  fill(p.k, t * c.heads * c.d_qk, 2.0);
  fill(p.v, t * c.heads * c.d_v, 1.0);
  fill(p.dout, t * c.heads * c.d_v, 1.0);
  return p;
}

Reference Exact(const Problem& p) {
  const Case& c = p.c;
  const size_t t = static_cast<size_t>(c.batch) * c.seq, S = static_cast<size_t>(c.seq);
  const size_t ldq = static_cast<size_t>(c.heads) * c.d_qk,
               ldv = static_cast<size_t>(c.heads) * c.d_v;
  Reference r{std::vector<double>(t * ldv), std::vector<double>(t * c.heads),
              std::vector<double>(t * ldq), std::vector<double>(t * ldq),
              std::vector<double>(t * ldv)};
  std::vector<double> prob(S * S), dp(S * S);
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      auto Q = [&](size_t i, int d) { return p.q[(b * S + i) * ldq + h * c.d_qk + d]; };
      auto K = [&](size_t j, int d) { return p.k[(b * S + j) * ldq + h * c.d_qk + d]; };
      auto V = [&](size_t j, int d) { return p.v[(b * S + j) * ldv + h * c.d_v + d]; };
      auto G = [&](size_t i, int d) { return p.dout[(b * S + i) * ldv + h * c.d_v + d]; };
      for (size_t i = 0; i < S; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (size_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < c.d_qk; ++d) s += Q(i, d) * K(j, d);
          prob[i * S + j] = s * p.scale;
          mx = std::max(mx, prob[i * S + j]);
        }
        double sum = 0;
        for (size_t j = 0; j <= i; ++j) sum += (prob[i * S + j] = std::exp(prob[i * S + j] - mx));
        for (size_t j = 0; j <= i; ++j) prob[i * S + j] /= sum;
        r.lse[(b * c.heads + h) * S + i] = mx + std::log(sum);
        for (int d = 0; d < c.d_v; ++d) {
          double o = 0;
          for (size_t j = 0; j <= i; ++j) o += prob[i * S + j] * V(j, d);
          r.out[(b * S + i) * ldv + h * c.d_v + d] = o;
        }
        double delta = 0;
        for (size_t j = 0; j <= i; ++j) {
          double g = 0;
          for (int d = 0; d < c.d_v; ++d) g += G(i, d) * V(j, d);
          dp[i * S + j] = g;
          delta += prob[i * S + j] * g;
        }
        for (size_t j = 0; j <= i; ++j)
          dp[i * S + j] = prob[i * S + j] * (dp[i * S + j] - delta);  // dS
      }
      for (size_t i = 0; i < S; ++i) {
        for (int d = 0; d < c.d_qk; ++d) {
          double dq = 0, dk = 0;
          for (size_t j = 0; j <= i; ++j) dq += dp[i * S + j] * K(j, d);
          for (size_t j = i; j < S; ++j) dk += dp[j * S + i] * Q(j, d);
          r.dq[(b * S + i) * ldq + h * c.d_qk + d] = dq * p.scale;
          r.dk[(b * S + i) * ldq + h * c.d_qk + d] = dk * p.scale;
        }
        for (int d = 0; d < c.d_v; ++d) {
          double dv = 0;
          for (size_t j = i; j < S; ++j) dv += prob[j * S + i] * G(j, d);
          r.dv[(b * S + i) * ldv + h * c.d_v + d] = dv;
        }
      }
    }
  }
  return r;
}

template <typename T>
std::vector<T> Stored(const std::vector<double>& x) {
  std::vector<T> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = static_cast<float>(x[i]);
    } else {
      out[i] = __float2bfloat16_rn(static_cast<float>(x[i]));
    }
  }
  return out;
}

template <typename T>
std::vector<T> Poisoned(size_t n) {
  std::vector<T> v(n);
  std::memset(static_cast<void*>(v.data()), 0xFF, n * sizeof(T));  // NaN in f32 and bf16
  return v;
}

template <typename T>
std::vector<double> Values(const std::vector<T>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = moe::kernels::cuda::mma::ToFloat(x[i]);
  return out;
}

struct EmulatedLaunch {
  template <typename... Params, typename... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  const Args&... args) const {
    moe::emu::Launch(kernel, grid, block, smem, args...);
  }
};

int g_failures = 0;

void Compare(const std::string& name, const std::vector<double>& got,
             const std::vector<double>& ref, bool bf16, double rtol) {
  double ref_max = 0, worst = 0;
  size_t at = 0, bad = 0;
  for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    const double excess = !std::isfinite(got[i]) ? 1e30
                          : bf16                 ? err / (1e-2 * std::max(ref_max, 1e-30))
                                                 : err / (1e-5 + rtol * std::fabs(ref[i]));
    bad += excess > 1 ? 1 : 0;
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  std::printf("  %-6s %-4s %8zu elements  worst err/tol %.3g%s\n", name.c_str(),
              bad ? "FAIL" : "ok", got.size(), worst, bad ? "" : "");
  if (bad) {
    std::printf("    %zu bad; worst at [%zu]: got %.8g, exact %.8g\n", bad, at, got[at], ref[at]);
    ++g_failures;
  }
}

template <typename T>
void Run(const Case& c, uint32_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  const Problem p = MakeProblem(c, seed);
  const Reference r = Exact(p);
  const size_t t = static_cast<size_t>(c.batch) * c.seq;
  const auto q = Stored<T>(p.q), k = Stored<T>(p.k), v = Stored<T>(p.v), dout = Stored<T>(p.dout);
  auto out = Poisoned<T>(t * c.heads * c.d_v), dq = Poisoned<T>(q.size()),
       dk = Poisoned<T>(k.size()), dv = Poisoned<T>(v.size());
  auto lse = Poisoned<float>(t * c.heads), delta = Poisoned<float>(t * c.heads);
  const float scale = static_cast<float>(p.scale);
  attn::Forward(attn::FwdArgs<T>{q.data(), k.data(), v.data(), out.data(), lse.data(), c.seq,
                                 c.heads, c.d_qk, c.d_v, scale * attn::kLog2e},
                c.batch, EmulatedLaunch{});
  const attn::BwdArgs<T> b{q.data(),     k.data(),  v.data(),  dout.data(), lse.data(),
                           delta.data(), dq.data(), dk.data(), dv.data(),   c.seq,
                           c.heads,      c.d_qk,    c.d_v,     scale,       scale * attn::kLog2e};
  attn::Backward(b, static_cast<const T*>(out.data()), delta.data(), c.batch, EmulatedLaunch{});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s B=%d S=%d H=%d d_qk=%d d_v=%d (%.1f s)\n", c.bf16 ? "bf16" : "f32", c.batch,
              c.seq, c.heads, c.d_qk, c.d_v, secs);
  const double fwd_rtol = 1e-4, bwd_rtol = 1e-3;
  Compare("out", Values(out), r.out, c.bf16, fwd_rtol);
  std::vector<double> lse_d(lse.begin(), lse.end());
  Compare("lse", lse_d, r.lse, false, c.bf16 ? 1e-2 : fwd_rtol);  // f32 storage either way
  Compare("dq", Values(dq), r.dq, c.bf16, bwd_rtol);
  Compare("dk", Values(dk), r.dk, c.bf16, bwd_rtol);
  Compare("dv", Values(dv), r.dv, c.bf16, bwd_rtol);
}

}  // namespace

int main() {
  // Each compiled head shape in both storage types; partial tiles, S = 1, padded head sizes.
  const Case cases[] = {
      {false, 1, 37, 2, 64, 64},   // f32 (64, 64), one partial tile, two heads
      {true, 2, 70, 1, 192, 128},  // bf16 MLA shape, two tiles each, two sequences
      {true, 1, 1, 3, 64, 64},     // S = 1
      {false, 1, 40, 1, 24, 16},  // head sizes multiples of 8, not 16: zero padding inside a k step
      {true, 1, 130, 1, 256, 256},  // bf16 (256, 256): three tiles, the last of two rows
      {false, 1, 67, 1, 192, 128},  // f32 MLA shape: the backward's 32-row tiles, three of them
      {true, 1, 65, 2, 128, 128},   // bf16 (128, 128)
      {false, 1, 33, 1, 256, 200},  // f32 (256, 256) with d_v padded
      {true, 1, 48, 1, 72, 40},     // bf16, (128, 128) padded
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    if (c.bf16) {
      Run<bf16>(c, seed++);
    } else {
      Run<float>(c, seed++);
    }
  }
  std::printf("%s: %d comparisons failed\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
