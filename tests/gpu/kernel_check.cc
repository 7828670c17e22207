// Every CUDA kernel against its CPU reference, through the same Tensor-level calls the engine
// makes: each case runs once on the CPU and once on the GPU from the same fresh random inputs, in
// fp32 and in bf16 (the CPU's bf16 path computes in fp32 between bf16 inputs and outputs, as the
// CUDA kernels do). Outputs start poisoned (NaN) so an element a kernel forgets to write fails;
// shapes are awkward (odd sizes, empty expert groups). Tolerances: fp32 elementwise |gpu - cpu| <=
// atol + 1e-4 |cpu| (looser where a long reduction runs in another order); bf16 max |gpu - cpu| <=
// max(1e-2 max |cpu|, atol). Exit 77 (ctest: skipped) with a loud message where there is no GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/rng.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"
#include "kernels/gpu_libraries.h"
#include "kernels/kernel_state.h"
#include "kernels/latent_attention.h"
#include "kernels/optimizer.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "kernels/runtime.h"
#include "kernels/swiglu.h"
#ifdef MOE_WITH_SM90A
#include "kernels/cuda/sm90a/cudnn_attention.h"
#include "kernels/cuda/sm90a/grouped_gemm.h"
#endif

namespace {

using moe::Device;
using moe::DType;
using moe::Tensor;
namespace k = moe::kernels;

struct Out {
  std::string name;
  Tensor t;
  double rtol = 1e-4, atol = 1e-5;  // fp32 tolerances
};
using Case = std::function<std::vector<Out>(Device, DType)>;

int g_failures = 0;
std::vector<std::string> g_rows;
// The device checked against the CPU: cuda:0, or the CPU itself when rehearsing the harness
// (MOE_GPU_CHECK_DEVICE=cpu: every case must then agree exactly, which tests the cases and the
// comparisons, not the kernels).
Device g_device = Device::Cuda(0);

Tensor Random(const Tensor::Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  moe::Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return t;
}

// A host fp32 tensor as `dt` on `dev` (bf16 rounds on the host, the same bits on both sides).
Tensor On(const Tensor& host, DType dt, Device dev) {
  Tensor t = host;
  if (dt != host.dtype()) {
    t = Tensor::Empty(host.shape(), dt);
    k::Convert(host, t);
  }
  return dev.is_cpu() ? t.Clone() : t.Clone(dev);
}

// Uninitialised output filled with NaN (all-ones bits are a NaN in f32 and bf16).
Tensor Poisoned(const Tensor::Shape& shape, DType dt, Device dev) {
  Tensor t = Tensor::Empty(shape, dt, dev);
  moe::GetAllocator(dev)->Memset(t.raw(), 0xFF, t.nbytes());
  return t;
}

Tensor Scalar(double v) { return Tensor::FromVector<float>({static_cast<float>(v)}, {1}); }

std::vector<double> Host(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kI32) {
    const auto v = t.ToVector<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
    return out;
  }
  if (t.dtype() == DType::kI64) {
    const auto v = t.ToVector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(v[i]);
    return out;
  }
  Tensor f = Tensor::Empty(t.shape(), DType::kF32, t.device());
  k::Convert(t, f);
  const auto v = f.ToVector<float>();
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  return out;
}

void Compare(const std::string& name, DType dt, const Out& gpu_out, const Out& cpu_out) {
  // A kernel fault is sticky: record it before touching the data, and stop with the table so far.
  const std::string cuda_error = g_device.is_cuda() ? moe::kernels::CudaSynchronize() : "";
  if (!cuda_error.empty()) {
    std::printf("%-36s %-5s FAIL   CUDA error %s\n", name.c_str(), moe::DTypeName(dt),
                cuda_error.c_str());
    for (const auto& r : g_rows) std::printf("%s\n", r.c_str());
    std::printf("FAIL: a CUDA error stopped the kernel checks after %zu of them\n", g_rows.size());
    std::exit(1);
  }
  const std::vector<double> gpu = Host(gpu_out.t), ref = Host(cpu_out.t);
  bool ok = gpu.size() == ref.size();
  double worst = 0;
  int64_t at = -1, bad = 0;
  double ref_max = 0;
  for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
  const bool exact = gpu_out.t.dtype() == DType::kI32 || (gpu_out.rtol == 0 && gpu_out.atol == 0);
  for (size_t i = 0; ok && i < gpu.size(); ++i) {
    const double err = std::fabs(gpu[i] - ref[i]);
    double excess;
    if (!std::isfinite(gpu[i])) {
      excess = 1e30;
    } else if (exact) {
      excess = err > 0 ? 1e30 : 0;
    } else if (dt == DType::kBF16) {  // bf16 outputs, and fp32 outputs of bf16 inputs: normwise,
      // down to the fp32 absolute floor: an output that is zero in exact arithmetic (attention at
      // S = 1: a softmax over one key has no gradient, dS = P (dP - D) = 0) is rounding noise on
      // both sides (the GPU's 6e-9 against the CPU's 0 on an H200), not 1e-2 of nothing.
      excess = err / std::max(1e-2 * ref_max, gpu_out.atol);
    } else {
      excess = err / (gpu_out.atol + gpu_out.rtol * std::fabs(ref[i]));
    }
    if (excess > 1) ++bad;
    if (excess > worst) {
      worst = excess;
      at = static_cast<int64_t>(i);
    }
  }
  ok = ok && bad == 0;
  char row[512];
  std::snprintf(row, sizeof(row), "%-36s %-5s %-6s %9zu elements  worst err/tol %.3g%s",
                name.c_str(), moe::DTypeName(dt), ok ? "ok" : "FAIL", gpu.size(), worst,
                cuda_error.empty() ? "" : ("  CUDA error " + cuda_error).c_str());
  if (!ok && at >= 0) {
    std::printf("  %s %s: %lld bad; worst at [%lld]: gpu %.8g, cpu %.8g\n", name.c_str(),
                moe::DTypeName(dt), static_cast<long long>(bad), static_cast<long long>(at),
                gpu[static_cast<size_t>(at)], ref[static_cast<size_t>(at)]);
  }
  g_rows.push_back(row);
  g_failures += ok ? 0 : 1;
}

// The device-side bounds checks (GPU only: the CPU kernels stop at a bad index with MOE_CHECK): a
// token id past the vocabulary, a negative target and a gather index past the rows are recorded as
// their bits and read nothing (the outputs there are zero), and FoldBadIndices hands the bits over
// and clears them.
void BoundsCase() {
  char row[256];
  if (g_device.is_cpu()) {
    std::snprintf(row, sizeof(row), "%-36s %-5s %-6s %s", "bounds checks", "-", "skip",
                  "GPU only (CPU kernels MOE_CHECK)");
    g_rows.push_back(row);
    return;
  }
  const Device dev = g_device;
  const int64_t vocab = 50, d = 8;
  Tensor table = On(Random({vocab, d}, 50), DType::kF32, dev);
  Tensor ids = Tensor::FromVector<int32_t>({3, vocab + 5, 7}, {3}).Clone(dev);
  Tensor emb = Poisoned({3, d}, DType::kF32, dev);
  k::EmbeddingForward(table, ids, emb);
  Tensor logits = On(Random({2, vocab}, 51), DType::kF32, dev);
  Tensor targets = Tensor::FromVector<int32_t>({4, -1}, {2}).Clone(dev);
  (void)k::CrossEntropy(logits, targets, 1.0, Tensor());
  Tensor index = Tensor::FromVector<int32_t>({0, 1000}, {2}).Clone(dev);
  Tensor gathered = Poisoned({2, d}, DType::kF32, dev);
  k::GatherRows(table, index, gathered);
  Tensor experts = Tensor::FromVector<int32_t>({1, 9, 0, 2}, {2, 2}).Clone(dev);
  Tensor counts = Tensor::Empty({3}, DType::kI64, dev),
         ros = Tensor::Empty({2, 2}, DType::kI32, dev);
  Tensor tor = Tensor::Empty({4}, DType::kI32, dev);
  k::BuildDispatchPlanOnDevice(experts, 3, counts, ros,
                               tor);  // expert 9 of 3: recorded, counted as 0
  Tensor acc = Tensor::Zeros({2}, DType::kF64, dev);
  k::FoldBadIndices(acc, 0);
  k::FoldBadIndices(acc, 1);  // cleared by the first
  const std::vector<double> bits = acc.ToVector<double>(), e = Host(emb), g = Host(gathered);
  const unsigned want = k::kBadTokenId | k::kBadTarget | k::kBadRowIndex | k::kBadExpert;
  const bool ok = static_cast<unsigned>(bits[0]) == want && bits[1] == 0 &&
                  e[static_cast<size_t>(d)] == 0 && g[static_cast<size_t>(d)] == 0 &&
                  e[0] == Host(table)[static_cast<size_t>(3 * d)] &&
                  Host(counts) == std::vector<double>{2, 1, 1};
  std::snprintf(row, sizeof(row), "%-36s %-5s %-6s bits %u (want %u), then %u; %s", "bounds checks",
                "f32", ok ? "ok" : "FAIL", static_cast<unsigned>(bits[0]), want,
                static_cast<unsigned>(bits[1]),
                k::BadIndexMessage(static_cast<unsigned>(bits[0])).c_str());
  g_rows.push_back(row);
  g_failures += ok ? 0 : 1;
}

void Run(const std::string& family, const Case& c,
         std::vector<DType> dtypes = {DType::kF32, DType::kBF16}) {
  for (DType dt : dtypes) {
    const std::vector<Out> ref = c(Device::Cpu(), dt);
    const std::vector<Out> got = c(g_device, dt);
    for (size_t i = 0; i < ref.size(); ++i) Compare(family + " " + ref[i].name, dt, got[i], ref[i]);
  }
}

// A device copy of host data (index tensors, frequencies).
Tensor To(Tensor host, Device dev) { return dev.is_cpu() ? host : host.Clone(dev); }

// RoPE in both layouts on a block of columns inside each head (MLA's rotated part), on many heads
// and on one (the shared key); the backward undoes the forward.
void RopeCases() {
  struct Shape {
    const char* name;
    k::RopeLayout layout;
    int64_t heads, stride, offset, pairs;
  };
  for (const Shape& sh : {Shape{"rope half-split", k::RopeLayout::kHalfSplit, 3, 24, 8, 8},
                          Shape{"rope pairs 16 heads", k::RopeLayout::kPairs, 16, 40, 24, 8},
                          Shape{"rope pairs shared key", k::RopeLayout::kPairs, 1, 72, 64, 4}}) {
    Run(sh.name, [&](Device dev, DType dt) {
      const int64_t seq = 7, t = 3 * seq, d = 2 * sh.pairs;
      std::vector<float> freq(static_cast<size_t>(sh.pairs));
      for (int64_t j = 0; j < sh.pairs; ++j)
        freq[static_cast<size_t>(j)] = static_cast<float>(std::pow(10000.0, -2.0 * j / d));
      Tensor inv_freq = To(Tensor::FromVector(freq, {sh.pairs}), dev);
      Tensor x = On(Random({t, sh.heads * sh.stride}, 13), dt, dev);
      k::RopeForward(x, seq, sh.heads, sh.offset, inv_freq, sh.layout);
      Tensor fwd = x.Clone();
      k::RopeBackward(x, seq, sh.heads, sh.offset, inv_freq, sh.layout);
      return std::vector<Out>{{"fwd", fwd}, {"bwd", x}};
    });
  }
}

// Decoding: RoPE at a first position (where a cached sequence continues), and the latent attention
// over MLA's cache (one query and a prefill of 5 over 37 rows; 576-wide rows as DeepSeek-V3's).
void DecodeCases() {
  Run("rope at position 30", [](Device dev, DType dt) {
    std::vector<float> freq(8);
    for (int64_t j = 0; j < 8; ++j)
      freq[static_cast<size_t>(j)] = static_cast<float>(std::pow(10000.0, -2.0 * j / 16));
    Tensor inv_freq = To(Tensor::FromVector(freq, {8}), dev);
    Tensor x = On(Random({3, 2 * 24}, 17), dt, dev);
    k::RopeForward(x, 3, 2, 8, inv_freq, k::RopeLayout::kPairs, 30);
    return std::vector<Out>{{"fwd", x}};
  });
  struct Shape {
    const char* name;
    int64_t n, rows, heads, d, dv;
  };
  for (const Shape& sh : {Shape{"latent attention decode", 1, 37, 3, 48, 32},
                          Shape{"latent attention prefill", 5, 37, 4, 48, 32},
                          Shape{"latent attention 576", 2, 300, 16, 576, 512}}) {
    Run(sh.name, [&](Device dev, DType dt) {
      Tensor q = On(Random({sh.n, sh.heads * sh.d}, 61), dt, dev);
      Tensor cache = On(Random({sh.rows, sh.d}, 62), dt, dev);
      Tensor out = Tensor::Empty({sh.n, sh.heads * sh.dv}, dt, dev);
      k::LatentAttentionDecode(q, cache, sh.heads, sh.dv, 0.3, out);
      return std::vector<Out>{{"out", out}};
    });
  }
}

// MLA's column-block moves: CopyColumns with and without row broadcast, SumColumns with and without
// groups, ScatterAddRows (the backward of a gather; distinct indices). Destinations start random,
// not poisoned: the columns outside the block must come through untouched.
void ColumnCases() {
  Run("copy_columns", [](Device dev, DType dt) {
    const int64_t rows = 37, b = 3;
    Tensor src = On(Random({rows, 29}, 50), dt, dev);
    Tensor dst1 = On(Random({rows, 41}, 51), dt, dev),
           dst3 = On(Random({rows * b, 23}, 52), dt, dev);
    k::CopyColumns(src, 5, dst1, 11, 24);
    k::CopyColumns(src, 21, dst3, 7, 8, b);
    return std::vector<Out>{{"block", dst1, 0, 0}, {"broadcast", dst3, 0, 0}};
  });
  Run("sum_columns", [](Device dev, DType dt) {
    const int64_t rows = 37, g = 4;
    Tensor src1 = On(Random({rows, 29}, 53), dt, dev),
           src4 = On(Random({rows * g, 23}, 54), dt, dev);
    Tensor dst1 = On(Random({rows, 41}, 55), dt, dev), dst4 = On(Random({rows, 19}, 56), dt, dev);
    k::SumColumns(src1, 5, dst1, 11, 24);
    k::SumColumns(src4, 7, dst4, 3, 16, g);
    return std::vector<Out>{{"block", dst1}, {"groups", dst4}};
  });
  Run("scatter_add_rows", [](Device dev, DType dt) {
    const int64_t rows = 61, dst_rows = 97, d = 131;
    std::vector<int32_t> idx(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      idx[static_cast<size_t>(r)] = static_cast<int32_t>((r * 37 + 5) % dst_rows);  // distinct
    Tensor index = To(Tensor::FromVector(idx, {rows}), dev);
    Tensor src = On(Random({rows, d}, 57), dt, dev), dst = On(Random({dst_rows, d}, 58), dt, dev);
    k::ScatterAddRows(src, index, dst);
    return std::vector<Out>{{"", dst}};
  });
}

// AdamW with fp32 moments and with bf16 moments (fp32 master weights and gradients either way).
void AdamWCases() {
  for (DType moments : {DType::kF32, DType::kBF16}) {
    Run(moments == DType::kF32 ? "adamw" : "adamw bf16 moments",
        [&](Device dev, DType) {
          const int64_t n = 10007;
          Tensor p = On(Random({n}, 17), DType::kF32, dev),
                 g = On(Random({n}, 18), DType::kF32, dev);
          Tensor m = On(Random({n}, 19, 0, 0.1), moments, dev),
                 v = On(Random({n}, 20, 0, 0.01), moments, dev);
          k::AdamWConfig c{.lr = 1e-3,
                           .beta1 = 0.9,
                           .beta2 = 0.95,
                           .eps = 1e-8,
                           .weight_decay = 0.1,
                           .step = 7,
                           .grad_scale = 0.5};
          k::AdamW(p, g, m, v, c);
          // bf16 moments: both sides round the same fp32 value; a rare tie apart is one bf16 step
          // (2^-8).
          const double mtol = moments == DType::kF32 ? 1e-4 : 1e-2;
          return std::vector<Out>{
              {"param", p, 1e-5, 1e-7}, {"m", m, mtol, 1e-7}, {"v", v, mtol, 1e-9}};
        },
        {DType::kF32});
  }
}

// The attention backward in the deterministic mode (deterministic training): the same bits twice
// (dq, dk, dv), on whichever path runs it, and the CPU's values within the bf16 tolerance.
void AttentionDeterministicCase() {
  k::SetDeterministicKernels(true);
  Run("attention deterministic mla S=513",
      [](Device dev, DType dt) {
        const int64_t batch = 2, seq = 513, h = 4, dqk = 192, dv = 128, t = batch * seq;
        Tensor q = On(Random({t, h * dqk}, 84), dt, dev),
               kt = On(Random({t, h * dqk}, 85), dt, dev), v = On(Random({t, h * dv}, 86), dt, dev),
               g = On(Random({t, h * dv}, 87), dt, dev);
        Tensor out = Poisoned({t, h * dv}, dt, dev),
               lse = Poisoned({batch * h * seq}, DType::kF32, dev);
        const double scale = 1.0 / std::sqrt(static_cast<double>(dqk));
        k::AttentionForward(q, kt, v, batch, seq, h, scale, out, lse);
        std::vector<Tensor> grads;
        for (int r = 0; r < 2; ++r) {
          Tensor dq = Poisoned(q.shape(), dt, dev), dk = Poisoned(kt.shape(), dt, dev),
                 dvv = Poisoned(v.shape(), dt, dev);
          k::AttentionBackward(q, kt, v, out, g, lse, batch, seq, h, scale, dq, dk, dvv);
          grads.insert(grads.end(), {dq, dk, dvv});
        }
        for (int i = 0; i < 3; ++i) {  // the second run's bits against the first's
          Compare("attention deterministic: the same twice", dt, {"", grads[3 + i], 0, 0},
                  {"", grads[i], 0, 0});
        }
        return std::vector<Out>{{"bwd dq", grads[0], 1e-3, 1e-5},
                                {"bwd dk", grads[1], 1e-3, 1e-5},
                                {"bwd dv", grads[2], 1e-3, 1e-5}};
      },
      {DType::kBF16});
  k::SetDeterministicKernels(false);
}

// The fused kernels against the passes they replace, on the same device, bit for bit: the residual
// add fused into the norm (and its gradient into the backward), the bucket's AdamW against AdamW
// per parameter followed by the master-to-bf16 conversion.
void FusedEqualsUnfusedCases() {
  const int64_t rows = 129, d = 200;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor x = On(Random({rows, d}, 90), dt, g_device), r = On(Random({rows, d}, 91), dt, g_device),
           w = On(Random({d}, 92), dt, g_device), g = On(Random({rows, d}, 93), dt, g_device);
    Tensor sum = Poisoned({rows, d}, dt, g_device), y = Poisoned({rows, d}, dt, g_device),
           rstd = Poisoned({rows}, DType::kF32, g_device);
    k::AddRmsNormForward(x, r, w, 1e-6, sum, y, rstd);
    Tensor sum2 = Poisoned({rows, d}, dt, g_device), y2 = Poisoned({rows, d}, dt, g_device),
           rstd2 = Poisoned({rows}, DType::kF32, g_device);
    k::Add(sum2, x, r);
    k::RmsNormForward(sum2, w, 1e-6, y2, rstd2);
    Compare("fused = unfused: add + rmsnorm y", dt, {"y", y, 0, 0}, {"y", y2, 0, 0});
    Tensor dx = Poisoned({rows, d}, dt, g_device), dw = Tensor::Zeros({d}, DType::kF32, g_device);
    k::RmsNormBackwardAdd(g, sum, w, rstd, r, dx, dw);
    Tensor dx2 = Poisoned({rows, d}, dt, g_device), dw2 = Tensor::Zeros({d}, DType::kF32, g_device);
    k::RmsNormBackward(g, sum, w, rstd, dx2, dw2);
    k::Add(dx2, dx2, r);
    Compare("fused = unfused: rmsnorm bwd + residual", dt, {"dx", dx, 0, 0}, {"dx", dx2, 0, 0});
  }
  const std::vector<k::AdamWSegment> segs = {{0, 5000, true}, {5000, 5100, false}};
  k::AdamWConfig c{.lr = 1e-3, .weight_decay = 0.1, .step = 4, .grad_scale = 0.7};
  k::AdamWBuffers a;
  a.master = On(Random({5100}, 94), DType::kF32, g_device);
  a.grad = On(Random({5100}, 95), DType::kF32, g_device);
  a.m = On(Random({5100}, 96, 0, 0.1), DType::kBF16, g_device);
  a.v = On(Random({5100}, 97, 0, 0.01), DType::kBF16, g_device);
  a.compute = Poisoned({5100}, DType::kBF16, g_device);
  k::AdamWBuffers b = a;
  for (Tensor* t : {&b.master, &b.m, &b.v, &b.compute}) *t = t->Clone();
  k::AdamWMulti(k::MakeAdamWPlan(segs, g_device), a, c);
  for (const k::AdamWSegment& sg : segs) {
    k::AdamWConfig cs = c;
    cs.weight_decay = sg.decay ? c.weight_decay : 0.0;
    k::AdamW(b.master.Rows(sg.begin, sg.end), b.grad.Rows(sg.begin, sg.end),
             b.m.Rows(sg.begin, sg.end), b.v.Rows(sg.begin, sg.end), cs);
  }
  k::Convert(b.master, b.compute);
  Compare("fused = unfused: adamw bucket master", DType::kF32, {"", a.master, 0, 0},
          {"", b.master, 0, 0});
  Compare("fused = unfused: adamw bucket m", DType::kBF16, {"", a.m, 0, 0}, {"", b.m, 0, 0});
  Compare("fused = unfused: adamw bucket compute", DType::kBF16, {"", a.compute, 0, 0},
          {"", b.compute, 0, 0});
}

// A bucket's AdamW in one launch (AdamWMulti): decayed and undecayed segments, one longer than a
// chunk, padding between them left alone, a sharded master and moments, the bf16 compute copy
// written in the same pass.
void AdamWBucketCases() {
  Run("adamw bucket",
      [&](Device dev, DType) {
        const std::vector<k::AdamWSegment> segs = {
            {64, 1000, true}, {1000, 1100, false}, {1200, 1200 + 3 * k::kAdamWChunkElements, true}};
        const int64_t numel = segs.back().end + 50, master_at = 64, moments_at = 32;
        k::AdamWBuffers b;
        b.master = On(Random({numel - master_at}, 21), DType::kF32, dev);
        b.grad = On(Random({numel}, 22), DType::kF32, dev);
        b.m = On(Random({numel - moments_at}, 23, 0, 0.1), DType::kBF16, dev);
        b.v = On(Random({numel - moments_at}, 24, 0, 0.01), DType::kBF16, dev);
        b.compute = On(Random({numel}, 25), DType::kBF16, dev);
        b.master_offset = master_at;
        b.moments_offset = moments_at;
        k::AdamWConfig c{.lr = 1e-3, .weight_decay = 0.1, .step = 5, .grad_scale = 0.5};
        k::AdamWMulti(k::MakeAdamWPlan(segs, dev), b, c);
        return std::vector<Out>{{"master", b.master, 1e-5, 1e-7},
                                {"m", b.m, 1e-2, 1e-7},
                                {"v", b.v, 1e-2, 1e-9},
                                {"compute bf16", b.compute, 1e-2, 1e-7}};
      },
      {DType::kF32});
}

// The balance loss from the unbiased top-k: top_k = 1, a middle k on scores with many ties (the
// lower index must win), top_k = E; with the gradient added to a random dscores, and without it.
void BalanceLossCases() {
  // The gradient alone (from zeros, so that its size sets the tolerance), at DeepSeek-V3's 256
  // experts with several chunks of tokens a sequence, 72 experts with ties on 4 levels, top-40 of
  // 512.
  struct Shape {
    int64_t seqs, len, e, k;
    int levels;
  };
  for (const Shape& sh :
       {Shape{2, 300, 256, 8, 0}, Shape{1, 129, 72, 8, 4}, Shape{2, 16, 512, 40, 0}}) {
    Run("balance loss " + std::to_string(sh.e) + " experts top-" + std::to_string(sh.k) +
            (sh.levels ? " ties" : ""),
        [&](Device dev, DType) {
          const int64_t t = sh.seqs * sh.len;
          Tensor s = Random({t, sh.e}, 75, 0.01, 1.0);
          for (int64_t i = 0; sh.levels > 0 && i < s.numel(); ++i)
            s.data<float>()[i] = (1 + std::floor(s.data<float>()[i] * sh.levels)) / sh.levels;
          Tensor scores = On(s, DType::kF32, dev),
                 dscores = Tensor::Zeros({t, sh.e}, DType::kF32, dev);
          const double aux = k::SeqAuxLoss(scores, sh.k, sh.seqs, sh.len, 1.0, dscores);
          return std::vector<Out>{{"loss", Scalar(aux), 1e-4, 1e-9}, {"grad", dscores, 1e-4, 1e-9}};
        },
        {DType::kF32});
  }
  for (int64_t kk : {1, 4, 16}) {
    Run("balance loss top-" + std::to_string(kk),
        [&](Device dev, DType) {
          const int64_t e = 16, seqs = 3, len = 33, t = seqs * len;
          Tensor s = Random({t, e}, 60 + static_cast<uint64_t>(kk), 0.05, 1.0);
          if (kk == 4) {  // quarters: most tokens have ties around their 4th largest score
            for (int64_t i = 0; i < s.numel(); ++i)
              s.data<float>()[i] = std::ceil(s.data<float>()[i] * 4) / 4;
          }
          Tensor scores = On(s, DType::kF32, dev);
          Tensor dscores = On(Random({t, e}, 70), DType::kF32, dev);
          const double aux = k::SeqAuxLoss(scores, kk, seqs, len, 0.01, dscores);
          const double aux_only = k::SeqAuxLoss(scores, kk, seqs, len, 0.01, Tensor());
          return std::vector<Out>{{"loss", Scalar(aux), 1e-4, 1e-9},
                                  {"loss, no grad", Scalar(aux_only), 1e-4, 1e-9},
                                  {"grad", dscores, 1e-4, 1e-7}};
        },
        {DType::kF32});
  }
}

// Flash attention, forward and backward, each device on its own out and lse: MLA's head sizes and
// equal ones, 1 and 16 heads, S not a multiple of the tiles, S = 1, a batch, and one long sequence.
void AttentionShapes(const std::string& path);

// Both attention paths on the GPU: cuDNN's fused SDPA (bf16, where cuDNN takes the shape; a shape
// it refuses is said on stderr and runs ours) and ours (MOE_ATTENTION=ours), each against the CPU.
void AttentionCases() {
  const k::AttentionKernels before = k::GetAttentionKernels();
  k::SetAttentionKernels(k::AttentionKernels::kAuto);
#ifdef MOE_WITH_SM90A
  const int64_t runs = k::cuda::sm90a::SdpaRuns();
#endif
  AttentionShapes("attention cudnn|ours");
#ifdef MOE_WITH_SM90A
  // Where cuDNN is here, its SDPA must have run those bf16 shapes (a silent fall back to ours would
  // leave every row above green): the MLA shape's refusal is a failure, said with cuDNN's reason.
  const int64_t ran = k::cuda::sm90a::SdpaRuns() - runs;
  const bool cudnn = k::cuda::sm90a::LoadCudnn().found, checked = g_device.is_cuda() && cudnn;
  const std::string detail = g_device.is_cpu() ? "needs a GPU (rehearsal)"
                             : !cudnn
                                 ? "NO cuDNN on this machine: " + k::cuda::sm90a::LoadCudnn().why
                                 : std::to_string(ran) + " cuDNN calls in the bf16 shapes";
  char row[512];
  std::snprintf(row, sizeof(row), "%-36s %-5s %-6s %s", "attention cudnn ran", "bf16",
                !checked ? "skip" : (ran > 0 ? "ok" : "FAIL"), detail.c_str());
  g_rows.push_back(row);
  g_failures += checked && ran == 0 ? 1 : 0;
#endif
  k::SetAttentionKernels(k::AttentionKernels::kOurs);
  AttentionShapes("attention ours");
  k::SetAttentionKernels(k::AttentionKernels::kAuto);
  AttentionDeterministicCase();
  k::SetAttentionKernels(before);
}

void AttentionShapes(const std::string& path) {
  struct Shape {
    const char* name;
    int64_t batch, seq, heads, d_qk, d_v;
    std::vector<DType> dtypes;
  };
  const std::vector<Shape> shapes = {
      {"mla S=300", 1, 300, 2, 192, 128, {DType::kF32, DType::kBF16}},
      {"16 heads S=257", 2, 257, 16, 64, 64, {DType::kF32, DType::kBF16}},
      {"S=1", 3, 1, 1, 64, 64, {DType::kF32, DType::kBF16}},
      {"d=24/16 S=70", 1, 70, 3, 24, 16, {DType::kF32, DType::kBF16}},
      {"S=4096", 1, 4096, 2, 64, 64, {DType::kBF16}},
      {"mla 16 heads S=512", 1, 512, 16, 192, 128, {DType::kBF16}},
  };
  for (const Shape& sh : shapes) {
    Run(
        path + " " + sh.name,
        [&](Device dev, DType dt) {
          const int64_t t = sh.batch * sh.seq, h = sh.heads;
          const double scale =
              0.8 /
              std::sqrt(static_cast<double>(sh.d_qk));  // not 1/sqrt(d): the scale is an input
          Tensor q = On(Random({t, h * sh.d_qk}, 80, -2, 2), dt, dev),
                 kt = On(Random({t, h * sh.d_qk}, 81, -2, 2), dt, dev);
          Tensor v = On(Random({t, h * sh.d_v}, 82), dt, dev),
                 g = On(Random({t, h * sh.d_v}, 83), dt, dev);
          Tensor out = Poisoned({t, h * sh.d_v}, dt, dev),
                 lse = Poisoned({sh.batch * h * sh.seq}, DType::kF32, dev);
          k::AttentionForward(q, kt, v, sh.batch, sh.seq, h, scale, out, lse);
          Tensor dq = Poisoned(q.shape(), dt, dev), dk = Poisoned(kt.shape(), dt, dev),
                 dv = Poisoned(v.shape(), dt, dev);
          k::AttentionBackward(q, kt, v, out, g, lse, sh.batch, sh.seq, h, scale, dq, dk, dv);
          return std::vector<Out>{{"fwd", out, 1e-4, 1e-5},
                                  {"lse", lse, 1e-4, 1e-5},
                                  {"bwd dq", dq, 1e-3, 1e-5},
                                  {"bwd dk", dk, 1e-3, 1e-5},
                                  {"bwd dv", dv, 1e-3, 1e-5}};
        },
        sh.dtypes);
  }
}

}  // namespace

// A row that is neither a pass nor a failure: the case cannot run here, and says why.
void SkipRow(const std::string& name, const std::string& why) {
  char row[512];
  std::snprintf(row, sizeof(row), "%-36s %-5s %-6s %s", name.c_str(), "-", "skip", why.c_str());
  g_rows.push_back(row);
}

#ifdef MOE_WITH_SM90A
// CUTLASS's Hopper grouped GEMM (kernels/cuda/sm90a) against the CPU's grouped GEMM: bf16, n and k
// multiples of 8 (its TMA alignment), rows per group not, empty groups first, between and last.
void CutlassGroupedGemmCase() {
  const std::string name = "grouped_gemm cutlass sm90a fwd";
  std::string why;
  const std::vector<int64_t> offsets = {0, 0, 37, 37, 301, 301};
  const int64_t n = 136, kk = 72, rows = offsets.back();
  Tensor xh = Random({rows, kk}, 40), wh = Random({5, n, kk}, 41);
  Tensor x = On(xh, DType::kBF16, Device::Cpu()), w = On(wh, DType::kBF16, Device::Cpu());
  Tensor ref = Poisoned({rows, n}, DType::kBF16, Device::Cpu());
  k::GroupedGemm(x, w, offsets, ref);
  const std::string dname = "grouped_gemm cutlass sm90a device counts";
  if (g_device.is_cpu()) {
    SkipRow(dname, "needs an sm_90 GPU (rehearsal)");
    return SkipRow(name, "needs an sm_90 GPU (rehearsal)");
  }
  Tensor xd = x.Clone(g_device), wd = w.Clone(g_device);
  Tensor y = Poisoned({rows, n}, DType::kBF16, g_device);
  if (!k::cuda::sm90a::GroupedGemmBf16(xd.raw(), wd.raw(), y.raw(), offsets, n, kk,
                                       k::KernelStream(), &why))
    return SkipRow(name, why);
  Compare(name, DType::kBF16, {"fwd", y, 1e-4, 1e-4}, {"fwd", ref, 1e-4, 1e-4});
  // The counts read from device memory (GroupedGemmDeviceCounts's path): no host read.
  Tensor counts = Tensor::FromVector<int64_t>({0, 37, 0, 264, 0}, {5}).Clone(g_device);
  Tensor yd = Poisoned({rows, n}, DType::kBF16, g_device);
  if (!k::cuda::sm90a::GroupedGemmBf16DeviceCounts(xd.raw(), wd.raw(), yd.raw(),
                                                   static_cast<const int64_t*>(counts.raw()), 5,
                                                   rows, n, kk, k::KernelStream(), &why))
    return SkipRow(dname, why);
  Compare(dname, DType::kBF16, {"fwd", yd, 1e-4, 1e-4}, {"fwd", ref, 1e-4, 1e-4});
  // And through the kernels' entry point, which must not read the counts (no host sync counted).
  const int64_t syncs = k::HostSyncs();
  Tensor ye = Poisoned({rows, n}, DType::kBF16, g_device);
  k::GroupedGemmDeviceCounts(xd, wd, counts, ye);
  Compare("grouped_gemm device counts (entry point)", DType::kBF16, {"fwd", ye, 1e-4, 1e-4},
          {"fwd", ref, 1e-4, 1e-4});
  if (k::HostSyncs() != syncs) {
    std::printf("FAIL: GroupedGemmDeviceCounts read the counts on an sm_90 GPU\n");
    ++g_failures;
  }
}

// cuDNN's fused SDPA, forward and backward: the graphs lowered and their plans built on this GPU
// for MLA's head dims (192/128) and plain MHA (128/128), causal. Running them is the attention
// path's.
void CudnnSdpaPlanCases() {
  namespace s9 = k::cuda::sm90a;
  const std::pair<const char*, s9::SdpaShape> shapes[] = {
      {"cudnn sdpa plans MLA 192/128", {2, 16, 512, 192, 128, true}},
      {"cudnn sdpa plans MHA 128/128", {2, 16, 512, 128, 128, true}}};
  for (const auto& [name, shape] : shapes) {
    if (g_device.is_cpu()) {
      SkipRow(name, "needs a GPU (rehearsal)");
      continue;
    }
    if (!s9::LoadCudnn().found) {
      SkipRow(name, "NO cuDNN on this machine: " + s9::LoadCudnn().why);
      continue;
    }
    const std::string why = s9::BuildSdpaPlans(shape);
    char row[512];
    std::snprintf(row, sizeof(row), "%-36s %-5s %-6s %s", name, "bf16", why.empty() ? "ok" : "FAIL",
                  why.empty() ? ("cuDNN " + s9::LoadCudnn().version).c_str() : why.c_str());
    g_rows.push_back(row);
    g_failures += why.empty() ? 0 : 1;
  }
}
#endif

// NVIDIA's libraries the sm_90a paths use (CUTLASS, the cuDNN frontend and cuDNN).
void LibraryCases() {
  std::printf("%s", k::FormatGpuLibraries(k::GpuLibraries()).c_str());
#ifdef MOE_WITH_SM90A
  CutlassGroupedGemmCase();
  CudnnSdpaPlanCases();
#else
  SkipRow("cutlass / cudnn-frontend paths", "NOT BUILT: configure found no headers");
#endif
}

int main() {
  const char* rehearse = std::getenv("MOE_GPU_CHECK_DEVICE");
  if (rehearse != nullptr && std::string(rehearse) == "cpu") {
    g_device = Device::Cpu();
    std::printf("REHEARSAL: the CPU stands in for the GPU (MOE_GPU_CHECK_DEVICE=cpu)\n");
  }
  std::string problem;
  const int devices = k::CudaDeviceCount(&problem);
  if (!problem.empty()) {
    std::printf("FAIL: a CUDA driver is here but CUDA does not work: %s\n", problem.c_str());
    return 1;
  }
  if (devices == 0 && g_device.is_cuda()) {
    std::printf(
        "SKIPPED: no CUDA device here; the GPU kernel checks run on a GPU machine: "
        "tests/gpu/check.sh\n");
    return 77;
  }
  if (g_device.is_cuda()) {
    if (moe::Status st = k::UseCudaDevice(0); !st.ok()) {
      std::printf("FAIL: %s\n", st.ToString().c_str());
      return 1;
    }
    std::printf("GPU: %s\n", k::CudaDeviceName(0).c_str());
  }
  const DType f32 = DType::kF32;
  const int64_t rows = 257, d = 259, f = 131, vocab = 1031, tokens = 97, topk = 3;

  Run("gemm", [](Device dev, DType dt) {
    std::vector<Out> outs;
    const int64_t m = 257, n = 259, kk = 131;
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        Tensor a = On(Random(ta ? Tensor::Shape{kk, m} : Tensor::Shape{m, kk}, 1), dt, dev);
        Tensor b = On(Random(tb ? Tensor::Shape{n, kk} : Tensor::Shape{kk, n}, 2), dt, dev);
        Tensor c = Poisoned({m, n}, dt, dev);
        k::Gemm(a, ta, b, tb, c);
        outs.push_back({"t" + std::to_string(ta) + std::to_string(tb), c, 1e-4, 1e-4});
      }
    }
    // Accumulating into an fp32 C (weight gradients, fp32 logits of bf16 inputs).
    Tensor a = On(Random({kk, m}, 3), dt, dev), b = On(Random({kk, n}, 4), dt, dev);
    Tensor c = On(Random({m, n}, 5), f32, dev);
    k::Gemm(a, true, b, false, c, 0.5, 1.0);
    outs.push_back({"accumulate into f32", c, 1e-4, 1e-4});
    // Deterministic training's contributions: the product added to an f64 accumulator, here past
    // 2^20 values so that the conversion's bounded staging goes round twice.
    Tensor ga = On(Random({64, 1100}, 6), dt, dev), gb = On(Random({64, 1000}, 7), dt, dev);
    Tensor acc = On(Random({1100, 1000}, 8), DType::kF64, dev);
    k::GemmAccumulate(ga, true, gb, false, acc);
    outs.push_back({"accumulate into f64", acc, 1e-4, 1e-4});
    return outs;
  });

  // Both ways the CUDA path runs a grouped GEMM, forced (auto picks by rows per expert: these are
  // few): one cuBLAS call per expert, and one cublasGemmGroupedBatchedEx call.
  for (const auto& [mode_name, mode] : {std::pair{"loop", k::GroupedGemmMode::kLoop},
                                        std::pair{"grouped", k::GroupedGemmMode::kGrouped}}) {
    k::SetGroupedGemmMode(mode);
    Run(std::string("grouped_gemm ") + mode_name, [](Device dev, DType dt) {
      const std::vector<int64_t> offsets = {0, 0, 37, 37,
                                            101};  // empty groups first, between and not last
      const int64_t n = 67, kk = 45;
      Tensor x = On(Random({101, kk}, 6), dt, dev), w = On(Random({4, n, kk}, 7), dt, dev),
             g = On(Random({101, n}, 8), dt, dev);
      Tensor y = Poisoned({101, n}, dt, dev), dx = Poisoned({101, kk}, dt, dev);
      Tensor dw = On(Random({4, n, kk}, 9), f32, dev);  // fp32 gradient, accumulated
      k::GroupedGemm(x, w, offsets, y);
      k::GroupedGemmBackwardData(g, w, offsets, dx);
      k::GroupedGemmBackwardWeight(g, x, offsets, dw);
      return std::vector<Out>{
          {"fwd", y, 1e-4, 1e-4}, {"bwd data", dx, 1e-4, 1e-4}, {"bwd weight", dw, 1e-4, 1e-4}};
    });
  }
  k::SetGroupedGemmMode(k::GroupedGemmMode::kAuto);

  Run("rmsnorm", [&](Device dev, DType dt) {
    Tensor x = On(Random({rows, d}, 10), dt, dev), w = On(Random({d}, 11), dt, dev),
           g = On(Random({rows, d}, 12), dt, dev);
    Tensor y = Poisoned({rows, d}, dt, dev), rstd = Poisoned({rows}, f32, dev);
    k::RmsNormForward(x, w, 1e-6, y, rstd);
    Tensor dx = Poisoned({rows, d}, dt, dev), dw = Tensor::Zeros({d}, f32, dev);
    k::RmsNormBackward(g, x, w, rstd, dx, dw);
    return std::vector<Out>{{"fwd", y}, {"rstd", rstd}, {"bwd dx", dx}, {"bwd dw", dw, 1e-4, 1e-4}};
  });

  // The residual add fused into the norm (forward), the residual's gradient into its backward.
  Run("rmsnorm fused residual", [&](Device dev, DType dt) {
    Tensor x = On(Random({rows, d}, 10), dt, dev), r = On(Random({rows, d}, 13), dt, dev),
           w = On(Random({d}, 11), dt, dev), g = On(Random({rows, d}, 12), dt, dev),
           dres = On(Random({rows, d}, 14), dt, dev);
    Tensor sum = Poisoned({rows, d}, dt, dev), y = Poisoned({rows, d}, dt, dev),
           rstd = Poisoned({rows}, f32, dev);
    k::AddRmsNormForward(x, r, w, 1e-6, sum, y, rstd);
    Tensor dx = Poisoned({rows, d}, dt, dev), dw = Tensor::Zeros({d}, f32, dev);
    k::RmsNormBackwardAdd(g, sum, w, rstd, dres, dx, dw);
    return std::vector<Out>{
        {"sum", sum, 0, 0}, {"fwd", y}, {"rstd", rstd}, {"bwd dx", dx}, {"bwd dw", dw, 1e-4, 1e-4}};
  });

  // f = 131, and a multiple of 8 (the 16-byte vector kernels).
  for (const int64_t ff : {f, int64_t{136}}) {
    Run(ff == f ? "swiglu" : "swiglu vec", [&](Device dev, DType dt) {
      Tensor gu = On(Random({rows, 2 * ff}, 14, -4, 4), dt, dev),
             g = On(Random({rows, ff}, 15), dt, dev);
      Tensor out = Poisoned({rows, ff}, dt, dev), dgu = Poisoned({rows, 2 * ff}, dt, dev);
      k::SwigluForward(gu, out);
      k::SwigluBackward(gu, g, dgu);
      return std::vector<Out>{{"fwd", out}, {"bwd", dgu}};
    });
  }

  // The logits in `logits_dt` (or the case's dtype), the gradient in the case's dtype.
  auto cross_entropy = [&](Device dev, DType dt, std::optional<DType> logits_dt) {
    Tensor logits = On(Random({tokens, vocab}, 16, -5, 5), logits_dt.value_or(dt), dev);
    Tensor targets = Tensor::Empty({tokens}, DType::kI32);
    for (int64_t i = 0; i < tokens; ++i)
      targets.data<int32_t>()[i] = static_cast<int32_t>((i * 37) % vocab);
    targets = dev.is_cpu() ? targets : targets.Clone(dev);
    Tensor grad = Poisoned({tokens, vocab}, dt, dev);
    const double loss = k::CrossEntropy(logits, targets, 0.5, grad);
    return std::vector<Out>{{"loss", Scalar(loss)}, {"grad", grad, 1e-4, 1e-7}};
  };
  Run("cross_entropy", [&](Device dev, DType dt) { return cross_entropy(dev, dt, std::nullopt); });
  // The head's loss: fp32 logits, their gradient written as bf16 by the same kernel (head_loss.h).
  Run("cross_entropy bf16 grad of f32 logits",
      [&](Device dev, DType dt) { return cross_entropy(dev, dt, DType::kF32); }, {DType::kBF16});

  // Width 259: an element a thread; 264: 16-byte vectors (the hidden sizes the presets train).
  for (const int64_t width : {d, int64_t{264}}) {
    Run(width % 8 == 0 ? "dispatch vectors d=" + std::to_string(width) : std::string("dispatch"),
        [&, width](Device dev, DType dt) {
          const int64_t d = width;
          const int64_t experts = 5;
          std::vector<int32_t> idx(static_cast<size_t>(tokens * topk));
          for (int64_t t = 0; t < tokens; ++t)
            for (int64_t j = 0; j < topk; ++j)
              idx[static_cast<size_t>(t * topk + j)] = static_cast<int32_t>((t + 2 * j) % experts);
          const auto plan = k::BuildDispatchPlan(idx.data(), tokens, topk, experts);
          Tensor tor = Tensor::FromVector(plan.token_of_row, {tokens * topk}),
                 ros = Tensor::FromVector(plan.row_of_slot, {tokens, topk});
          if (dev.is_cuda()) {
            tor = tor.Clone(dev);
            ros = ros.Clone(dev);
          }
          Tensor x = On(Random({tokens, d}, 21), dt, dev),
                 yp = On(Random({tokens * topk, d}, 22), dt, dev);
          Tensor w = On(Random({tokens, topk}, 23), dt, dev),
                 dy = On(Random({tokens, d}, 24), dt, dev);
          Tensor y = On(Random({tokens, d}, 25), dt, dev);
          Tensor xp = Poisoned({tokens * topk, d}, dt, dev), dx = Poisoned({tokens, d}, dt, dev);
          Tensor dyp = Poisoned({tokens * topk, d}, dt, dev),
                 dw = Poisoned({tokens, topk}, dt, dev);
          k::GatherRows(x, tor, xp);
          k::PermuteBackward(yp, ros, dx);
          k::CombineForward(yp, ros, w, y);
          k::CombineBackward(dy, yp, ros, w, dyp, dw);
          return std::vector<Out>{{"gather_rows", xp, 0, 0},
                                  {"permute bwd", dx},
                                  {"combine fwd", y},
                                  {"combine bwd dyp", dyp},
                                  {"combine bwd dw", dw, 1e-4, 1e-5}};
        });
  }

  // The routing plan on the device equals the host's: awkward sizes, and DeepSeek-V3's 256 experts
  // with 8 choices of 4,096 tokens, skewed to the low experts, the top fifth never chosen (exact:
  // ints).
  struct PlanShape {
    int64_t tokens, k, experts;
  };
  for (const PlanShape ps : {PlanShape{tokens, topk, 5}, PlanShape{4096, 8, 256}}) {
    Run("routing plan " + std::to_string(ps.experts) + "e",
        [ps](Device dev, DType) {
          Tensor idx = Tensor::Empty({ps.tokens, ps.k}, DType::kI32);
          moe::Rng rng(31);
          const int64_t used =
              ps.experts - ps.experts / 5;  // the top fifth is never chosen: empty experts
          for (int64_t t = 0; t < ps.tokens; ++t) {
            int32_t* row = idx.data<int32_t>() + t * ps.k;
            for (int64_t j = 0; j < ps.k;
                 ++j) {  // distinct per token, in any order, skewed to low experts
              do {
                row[j] = static_cast<int32_t>(std::min<int64_t>(
                    static_cast<int64_t>(rng.Uniform() * rng.Uniform() * static_cast<double>(used)),
                    used - 1));
              } while (std::find(row, row + j, row[j]) != row + j);
            }
          }
          if (dev.is_cuda()) idx = idx.Clone(dev);
          Tensor counts = Poisoned({ps.experts}, DType::kI64, dev),
                 ros = Poisoned({ps.tokens, ps.k}, DType::kI32, dev);
          Tensor tor = Poisoned({ps.tokens * ps.k}, DType::kI32, dev);
          k::BuildDispatchPlanOnDevice(idx, ps.experts, counts, ros, tor);
          return std::vector<Out>{
              {"counts", counts, 0, 0}, {"row_of_slot", ros, 0, 0}, {"token_of_row", tor, 0, 0}};
        },
        {DType::kI32});  // integers: the dtype only labels the rows
  }

  Run("embedding", [&](Device dev, DType dt) {
    const int64_t vocab_e = 53;
    Tensor table = On(Random({vocab_e, d}, 26), dt, dev), g = On(Random({tokens, d}, 27), dt, dev);
    Tensor ids = Tensor::Empty({tokens}, DType::kI32);
    for (int64_t i = 0; i < tokens; ++i)
      ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % vocab_e);
    ids = dev.is_cpu() ? ids : ids.Clone(dev);
    Tensor out = Poisoned({tokens, d}, dt, dev), dtab = Tensor::Zeros({vocab_e, d}, f32, dev);
    k::EmbeddingForward(table, ids, out);
    k::EmbeddingBackward(g, ids,
                         dtab);  // the GPU's scatter-add order differs: a tolerance, not equality
    return std::vector<Out>{{"fwd", out, 0, 0}, {"bwd", dtab, 1e-5, 1e-6}};
  });

  Run("router",
      [](Device dev, DType) {  // fp32 by design: the router GEMM writes fp32 logits
        const int64_t e = 16, kk = 4, seqs = 3, len = 33, t = seqs * len;
        k::RouterConfig cfg{.top_k = kk,
                            .num_groups = 4,
                            .topk_groups = 2,
                            .sigmoid = true,
                            .route_scale = 2.5,
                            .use_bias = true};
        Tensor logits = On(Random({t, e}, 28, -3, 3), f32, dev),
               bias = On(Random({e}, 29, -0.2, 0.2), f32, dev);
        Tensor gw = On(Random({t, kk}, 30), f32, dev);
        Tensor scores = Poisoned({t, e}, f32, dev), idx = Poisoned({t, kk}, DType::kI32, dev),
               w = Poisoned({t, kk}, f32, dev);
        k::RouterForward(logits, bias, cfg, scores, idx, w);
        Tensor dscores = Tensor::Zeros({t, e}, f32, dev);
        const double aux = k::SeqAuxLoss(scores, kk, seqs, len, 0.01, dscores);
        Tensor dlogits = Poisoned({t, e}, f32, dev);
        k::RouterBackward(scores, idx, gw, dscores, cfg, dlogits);
        return std::vector<Out>{{"scores", scores},
                                {"top-k", idx},
                                {"weights", w},
                                {"balance loss", Scalar(aux), 1e-4, 1e-9},
                                {"balance loss grad", dscores, 1e-4, 1e-9},
                                {"bwd", dlogits, 1e-4, 1e-6}};
      },
      {f32});

  Run("router dsv3",
      [](Device dev, DType) {  // DeepSeek-V3's routing shape: 256 experts, 8 groups, top-8
        const int64_t e = 256, kk = 8, seqs = 2, len = 40, t = seqs * len;
        k::RouterConfig cfg{.top_k = kk,
                            .num_groups = 8,
                            .topk_groups = 4,
                            .sigmoid = true,
                            .route_scale = 2.5,
                            .use_bias = true};
        Tensor logits = On(Random({t, e}, 40, -3, 3), f32, dev),
               bias = On(Random({e}, 41, -0.05, 0.05), f32, dev);
        Tensor gw = On(Random({t, kk}, 42), f32, dev);
        Tensor scores = Poisoned({t, e}, f32, dev), idx = Poisoned({t, kk}, DType::kI32, dev),
               w = Poisoned({t, kk}, f32, dev);
        k::RouterForward(logits, bias, cfg, scores, idx, w);
        Tensor dscores = Tensor::Zeros({t, e}, f32, dev);
        const double aux = k::SeqAuxLoss(scores, kk, seqs, len, 1e-4, dscores);
        Tensor dlogits = Poisoned({t, e}, f32, dev);
        k::RouterBackward(scores, idx, gw, dscores, cfg, dlogits);
        return std::vector<Out>{{"top-k", idx},
                                {"weights", w},
                                {"balance loss", Scalar(aux), 1e-4, 1e-12},
                                {"bwd", dlogits, 1e-4, 1e-7}};
      },
      {f32});

  Run("elementwise", [](Device dev, DType dt) {
    const int64_t n = 100003;
    Tensor a = On(Random({n}, 33), dt, dev), b = On(Random({n}, 34), dt, dev);
    Tensor sum = Poisoned({n}, dt, dev);
    k::Add(sum, a, b);
    k::Axpy(sum, 0.25, a);
    k::Scale(sum, 1.5);
    Tensor filled = Poisoned({n}, dt, dev);
    k::Fill(filled, 0.375);
    const double ss = k::SumSquares(a);
    Tensor converted = Poisoned({n}, dt == DType::kBF16 ? f32 : DType::kBF16, dev);
    k::Convert(a, converted);
    return std::vector<Out>{{"add/axpy/scale", sum},
                            {"fill", filled, 0, 0},
                            {"sum_squares", Scalar(ss), 1e-6, 0},
                            {"convert", converted, 0, 0}};
  });

  // FP8 quantise-dequantise: the hardware's e4m3 rounding against the CPU reference, bitwise;
  // values spread over many binades so subnormals, saturation-free tiles and partial tiles all
  // occur.
  Run("fp8 quant-dequant", [](Device dev, DType dt) {
    Tensor x = On(Random({203, 300}, 40, -3, 3), dt, dev),
           w = On(Random({3, 136, 200}, 41, -0.05, 0.05), dt, dev);
    const std::vector<int64_t> groups = {0, 50, 50, 180, 203};
    Tensor act = Poisoned({203, 300}, f32, dev), blocks = Poisoned({3, 136, 200}, f32, dev);
    Tensor cols = Poisoned({203, 300}, f32, dev), mx = Poisoned({203, 300}, f32, dev);
    k::Fp8QuantDequant(x, 1, 128, act);
    k::Fp8QuantDequant(w, 128, 128, blocks);
    k::Fp8QuantDequant(x, 128, 1, cols, groups);
    k::Fp8QuantDequant(x, 1, 32, mx, {}, /*mxfp8=*/true);
    return std::vector<Out>{{"1x128", act, 0, 0},
                            {"128x128 per expert", blocks, 0, 0},
                            {"128x1 grouped", cols, 0, 0},
                            {"mxfp8 1x32", mx, 0, 0}};
  });

  // FP8 GEMMs: cuBLASLt's block-scaled e4m3 on CUDA against the emulation (quantise, dequantise,
  // fp32 GEMM) on the CPU: Fprop, Dgrad and Wgrad of one linear layer at 197 tokens (padded inside)
  // x 320 x 576 (partial 128 blocks), the values' tiles and blocks powers of two apart so that a
  // misplaced scale shows. Only the order of the fp32 sums (and Hopper's FP8 accumulation within a
  // 128 block) may differ: 1e-3 of each output's largest value.
  Run("fp8 gemm", [](Device dev, DType dt) {
    const DType f32 = DType::kF32;
    const auto tiled = [](Tensor t, double scale) {  // 2^((r/128 + 3 c/128) mod 5 + r mod 4 - 4)
      const int64_t cols = t.dim(1);
      for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t r = i / cols, c = i % cols;
        t.data<float>()[i] *= static_cast<float>(
            scale * std::ldexp(1.0, static_cast<int>((r / 128 + 3 * (c / 128)) % 5 + r % 4) - 4));
      }
      return t;
    };
    Tensor x = On(tiled(Random({197, 576}, 42), 1), dt, dev),
           w = On(tiled(Random({320, 576}, 43), 0.05), dt, dev);
    Tensor dy = On(tiled(Random({197, 320}, 44), 1), dt, dev);
    Tensor y = Poisoned({197, 320}, f32, dev), dx = Poisoned({197, 576}, f32, dev);
    Tensor dw = On(Random({320, 576}, 45, -0.01, 0.01), f32, dev);  // Wgrad accumulates into it
    const auto out = [](const char* name, const Tensor& t) {
      double mx = 0;
      for (double v : Host(t)) mx = std::max(mx, std::isfinite(v) ? std::fabs(v) : 0.0);
      return Out{name, t, 1e-3, 1e-3 * std::max(mx, 1e-6)};
    };
    if (dev.is_cuda()) {
      if (const moe::Status st = k::Fp8GemmSupport(dev); !st.ok()) {
        std::printf("  fp8 gemm: %s\n", st.message().c_str());  // the rows below fail (NaN outputs)
        return std::vector<Out>{
            {"forward", y, 1e-3, 1e-3}, {"dgrad", dx, 1e-3, 1e-3}, {"wgrad", dw, 1e-3, 1e-3}};
      }
      k::Fp8GemmForward(x, w, y);
      k::Fp8GemmDgrad(dy, w, dx);
      k::Fp8GemmWgrad(dy, x, dw, 1.f);
    } else {
      const auto q = [&](const Tensor& t, int64_t tr, int64_t tc) {
        Tensor o = Tensor::Empty(t.shape(), f32, dev);
        k::Fp8QuantDequant(t, tr, tc, o);
        return o;
      };
      k::Gemm(q(x, 1, 128), false, q(w, 128, 128), true, y);
      k::Gemm(q(dy, 1, 128), false, q(w, 128, 128), false, dx);
      k::Gemm(q(dy, 128, 1), true, q(x, 128, 1), false, dw, 1.0, 1.0);
    }
    return std::vector<Out>{out("forward", y), out("dgrad", dx), out("wgrad", dw)};
  });

  RopeCases();
  DecodeCases();
  ColumnCases();
  BoundsCase();
  AdamWCases();
  AdamWBucketCases();
  FusedEqualsUnfusedCases();
  BalanceLossCases();
  AttentionCases();
  LibraryCases();

  std::printf("%-36s %-5s %-6s %s\n", "KERNEL", "DTYPE", "RESULT", "DETAIL");
  for (const auto& r : g_rows) std::printf("%s\n", r.c_str());
  std::printf("%s: %d of %zu kernel checks failed\n", g_failures ? "FAIL" : "PASS", g_failures,
              g_rows.size());
  return g_failures ? 1 : 0;
}
