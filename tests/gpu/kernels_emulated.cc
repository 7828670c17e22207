// Every CUDA kernel of kernels/cuda/ run on the CPU by the CUDA emulator (cuda_emulator.h) with the
// launch shapes of its .cu file, against the CPU path of its family (kernels/<family>.h on CPU
// tensors): fp32 and bf16, awkward sizes (not multiples of the block, one token, an empty expert,
// a grid smaller than the data so the grid-stride loops go round). Outputs start poisoned (NaN),
// so an element a kernel never writes fails. Tolerances: fp32 |x - ref| <= 1e-6 + 1e-5 |ref|
// (reductions summed in another order: 1e-4); bf16 |x - ref| <= 1e-2 max |ref| (one rounding
// apart); the FP8 quantisers bit for bit.
//
// Then the list: every __global__ kernel in the sources (argv[1], kernels/cuda/) is printed as
// `emulated: NAME` (run here, or by gpu_attention_emulated / gpu_routing_emulated) or `not
// emulated: NAME: reason`; a kernel in neither fails the test, so a new kernel cannot slip by.
// `--list DIR` prints the list alone, running nothing (ctest -L emulated shows it that way:
// tests/gpu/CMakeLists.txt).
#include "tests/gpu/cuda_emulator.h"
// The kernels after the emulator, which supplies their built-ins.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/rng.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/fp8_gemm_kernels.cuh"
#include "kernels/cuda/fp8_kernels.cuh"
#include "kernels/cuda/gemm_kernels.cuh"
#include "kernels/cuda/latent_attention_kernels.cuh"
#include "kernels/cuda/optimizer_kernels.cuh"
#include "kernels/cuda/permute_kernels.cuh"
#include "kernels/cuda/rmsnorm_kernels.cuh"
#include "kernels/cuda/rope_kernels.cuh"
#include "kernels/cuda/router_kernels.cuh"
#include "kernels/cuda/runtime_kernels.cuh"
#include "kernels/cuda/swiglu_kernels.cuh"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fp8.h"
#include "kernels/latent_attention.h"
#include "kernels/optimizer.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "kernels/swiglu.h"

namespace {

using moe::DType;
using moe::Tensor;
namespace cu = moe::kernels::cuda;
namespace k = moe::kernels;
using moe::emu::Launch;
using bf16 = __nv_bfloat16;

int g_failures = 0, g_checks = 0;
std::set<std::string> g_covered;

void Covers(std::initializer_list<const char*> kernels) {
  for (const char* name : kernels) g_covered.insert(name);
}

Tensor Random(const Tensor::Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t = Tensor::Empty(shape, DType::kF32);
  moe::Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return t;
}
// A host fp32 tensor as `dt` (bf16 rounds to nearest even).
Tensor As(const Tensor& f32, DType dt) {
  if (dt == DType::kF32) return f32.Clone();
  Tensor t = Tensor::Empty(f32.shape(), dt);
  k::Convert(f32, t);
  return t;
}
Tensor Poisoned(const Tensor::Shape& shape, DType dt) {
  Tensor t = Tensor::Empty(shape, dt);
  std::memset(t.raw(), 0xFF, t.nbytes());
  return t;
}
Tensor Ints(const std::vector<int32_t>& v) {
  return Tensor::FromVector<int32_t>(v, {static_cast<int64_t>(v.size())});
}
template <typename T>
T* P(const Tensor& t) {
  return static_cast<T*>(t.raw());
}
std::vector<double> Values(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::kF32:
        out[i] = t.data<float>()[i];
        break;
      case DType::kF64:
        out[i] = t.data<double>()[i];
        break;
      case DType::kBF16:
        out[i] = __bfloat162float(P<bf16>(t)[i]);
        break;
      case DType::kI32:
        out[i] = t.data<int32_t>()[i];
        break;
      case DType::kI64:
        out[i] = static_cast<double>(t.data<int64_t>()[i]);
        break;
    }
  }
  return out;
}

// One comparison, one line: the worst element and, on failure, the first mismatches.
void Check(const std::string& name, DType dt, const std::vector<double>& got,
           const std::vector<double>& ref, double rtol = 1e-5, double atol = 1e-6) {
  ++g_checks;
  double ref_max = 0, worst = 0;
  for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
  int64_t bad = 0, at = -1;
  std::string first;
  const bool sizes = got.size() == ref.size();
  for (size_t i = 0; sizes && i < got.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    // rtol = atol = 0: bit for bit, whatever the dtype.
    const double tol = rtol == 0 && atol == 0 ? 0
                       : dt == DType::kBF16   ? 1e-2 * ref_max + atol
                                              : atol + rtol * std::fabs(ref[i]);
    const bool ok = std::isfinite(got[i]) == std::isfinite(ref[i]) && (!(err > tol));
    if (!ok && bad++ < 3) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " [%zu] %.7g vs %.7g;", i, got[i], ref[i]);
      first += buf;
    }
    if (!ok || err > worst) {
      if (!ok && at < 0) at = static_cast<int64_t>(i);
      worst = std::max(worst, std::isfinite(err) ? err : 1e30);
    }
  }
  const bool ok = sizes && bad == 0;
  std::printf("  %-44s %-4s %-4s %zu values, max |err| %.3g%s%s\n", name.c_str(),
              moe::DTypeName(dt), ok ? "ok" : "FAIL", got.size(), worst,
              sizes ? "" : " (sizes differ)", first.c_str());
  g_failures += ok ? 0 : 1;
}
void Check(const std::string& name, DType dt, const Tensor& got, const Tensor& ref,
           double rtol = 1e-5, double atol = 1e-6) {
  Check(name, dt, Values(got), Values(ref), rtol, atol);
}

template <typename T>
constexpr DType kDt = std::is_same_v<T, float> ? DType::kF32 : DType::kBF16;

// ---- elementwise.cu ----
// The 16-byte vector kernels against the scalar ones, bit for bit (the tail past the last whole
// vector included), on the aligned host tensors.
template <typename T>
void ElementwiseVectors(const Tensor& x, const Tensor& y0, int64_t n, unsigned grid_cap) {
  const DType dt = kDt<T>;
  const std::string at = " n=" + std::to_string(n) + (grid_cap ? " (small grid)" : "");
  const int64_t vecs = n / cu::Vec16<T>::kLanes;
  const unsigned vb = grid_cap ? std::min(grid_cap, cu::Blocks(vecs)) : cu::Blocks(vecs);
  const unsigned sb = cu::Blocks(n);
  if (!cu::VectorOk(n, {x.raw(), y0.raw()})) {
    std::printf("  vector kernels n=%lld: host tensors not 16-byte aligned: FAIL\n",
                static_cast<long long>(n));
    ++g_failures;
    return;
  }
  const T* xs = P<T>(x);
  const T* ys = P<T>(y0);
  {
    Tensor got = y0.Clone(), ref = y0.Clone();
    Launch(cu::AxpyVecKernel<T>, dim3(vb), dim3(cu::kThreads), 0, P<T>(got), -0.7f, xs, n);
    Launch(cu::AxpyKernel<T>, dim3(sb), dim3(cu::kThreads), 0, P<T>(ref), -0.7f, xs, n);
    Check("AxpyVec = Axpy" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor got = Poisoned({n}, dt), ref = Poisoned({n}, dt);
    Launch(cu::AddVecKernel<T>, dim3(vb), dim3(cu::kThreads), 0, P<T>(got), xs, ys, n);
    Launch(cu::AddKernel<T>, dim3(sb), dim3(cu::kThreads), 0, P<T>(ref), xs, ys, n);
    Check("AddVec = Add" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor got = x.Clone(), ref = x.Clone();
    Launch(cu::ScaleVecKernel<T>, dim3(vb), dim3(cu::kThreads), 0, P<T>(got), 1.25f, n);
    Launch(cu::ScaleKernel<T>, dim3(sb), dim3(cu::kThreads), 0, P<T>(ref), 1.25f, n);
    Check("ScaleVec = Scale" + at, dt, got, ref, 0, 0);
  }
  Covers({"AxpyVecKernel", "AddVecKernel", "ScaleVecKernel"});
}

template <typename T>
void Elementwise(int64_t n, unsigned grid_cap) {
  const DType dt = kDt<T>;
  const std::string at = " n=" + std::to_string(n) + (grid_cap ? " (small grid)" : "");
  const unsigned blocks = grid_cap ? std::min(grid_cap, cu::Blocks(n)) : cu::Blocks(n);
  Tensor x = As(Random({n}, 1), dt), y0 = As(Random({n}, 2), dt);
  {
    Tensor got = Poisoned({n}, dt), ref = As(Random({n}, 3), dt);
    Launch(cu::FillKernel<T>, dim3(blocks), dim3(cu::kThreads), 0, P<T>(got), n, 0.375f);
    k::Fill(ref, 0.375);
    Check("Fill" + at, dt, got, ref);
  }
  {  // the same draws as the CPU's, bit for bit (kernel_types.h UniformAt)
    Tensor got = Poisoned({n}, dt), ref = Poisoned({n}, dt);
    Launch(cu::UniformKernel<T>, dim3(blocks), dim3(cu::kThreads), 0, P<T>(got), n, uint64_t{77});
    k::FillUniform(ref, 77);
    Check("FillUniform" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor got = y0.Clone(), ref = y0.Clone();
    Launch(cu::AxpyKernel<T>, dim3(blocks), dim3(cu::kThreads), 0, P<T>(got), -0.7f,
           static_cast<const T*>(P<T>(x)), n);
    k::Axpy(ref, -0.7, x);
    Check("Axpy" + at, dt, got, ref);
  }
  {
    Tensor got = Poisoned({n}, dt), ref = Poisoned({n}, dt);
    Launch(cu::AddKernel<T>, dim3(blocks), dim3(cu::kThreads), 0, P<T>(got),
           static_cast<const T*>(P<T>(x)), static_cast<const T*>(P<T>(y0)), n);
    k::Add(ref, x, y0);
    Check("Add" + at, dt, got, ref);
  }
  {
    Tensor got = x.Clone(), ref = x.Clone();
    Launch(cu::ScaleKernel<T>, dim3(blocks), dim3(cu::kThreads), 0, P<T>(got), 1.25f, n);
    k::Scale(ref, 1.25);
    Check("Scale" + at, dt, got, ref);
  }
  ElementwiseVectors<T>(x, y0, n, grid_cap);
  {
    const unsigned b = std::min<unsigned>(blocks, 1024);
    std::vector<double> partial(b, std::nan(""));
    Launch(cu::SumSquaresKernel<T>, dim3(b), dim3(cu::kThreads), 0, static_cast<const T*>(P<T>(x)),
           n, partial.data());
    double total = 0;
    for (double v : partial) total += v;
    Check("SumSquares" + at, dt, {total}, {k::SumSquares(x)}, 1e-12, 1e-12);
  }
  Covers({"FillKernel", "UniformKernel", "AxpyKernel", "AddKernel", "ScaleKernel",
          "SumSquaresKernel"});
}

template <typename T>
void RowsAndColumns(int64_t rows, int64_t cols) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(rows) + "x" + std::to_string(cols);
  unsigned bad = 0;
  Tensor src = As(Random({rows, cols}, 4), dt);
  std::vector<int32_t> perm(static_cast<size_t>(rows));
  moe::Rng rng(5);
  for (int64_t i = 0; i < rows; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = rows - 1; i > 0; --i)
    std::swap(
        perm[static_cast<size_t>(i)],
        perm[static_cast<size_t>(static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i + 1))))]);
  Tensor index = Ints(perm);
  {  // gathered in 16-byte vectors, else 4-byte words where the row allows, else 2-byte halves
     // (GatherRows)
    Tensor got = Poisoned({rows, cols}, dt), ref = Poisoned({rows, cols}, dt);
    const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
    if (row_bytes % 16 == 0) {
      using V = cu::Vec16<uint32_t>;
      const int64_t units = row_bytes / 16;
      Launch(cu::GatherRowsKernel<V>, dim3(cu::Blocks(rows * units)), dim3(cu::kThreads), 0,
             static_cast<const V*>(P<V>(src)), static_cast<const int32_t*>(P<int32_t>(index)),
             P<V>(got), rows, units, rows, &bad);
    } else if (row_bytes % 4 == 0) {
      const int64_t units = row_bytes / 4;
      Launch(cu::GatherRowsKernel<uint32_t>, dim3(cu::Blocks(rows * units)), dim3(cu::kThreads), 0,
             static_cast<const uint32_t*>(P<uint32_t>(src)),
             static_cast<const int32_t*>(P<int32_t>(index)), P<uint32_t>(got), rows, units, rows,
             &bad);
    } else {
      const int64_t units = row_bytes / 2;
      Launch(cu::GatherRowsKernel<uint16_t>, dim3(cu::Blocks(rows * units)), dim3(cu::kThreads), 0,
             static_cast<const uint16_t*>(P<uint16_t>(src)),
             static_cast<const int32_t*>(P<int32_t>(index)), P<uint16_t>(got), rows, units, rows,
             &bad);
    }
    k::GatherRows(src, index, ref);
    Check("GatherRows" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor dst0 = As(Random({rows, cols}, 6), dt), got = dst0.Clone(), ref = dst0.Clone();
    Launch(cu::ScatterAddRowsKernel<T>, dim3(cu::Blocks(rows * cols)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(src)), static_cast<const int32_t*>(P<int32_t>(index)),
           P<T>(got), rows, cols, rows, &bad);
    k::ScatterAddRows(src, index, ref);
    Check("ScatterAddRows" + at, dt, got, ref);
  }
  const int64_t width = cols / 2, src_col = cols - width;
  {  // MLA's broadcast of one row over a group of heads: dst rows = src rows * 3
    Tensor dst0 = As(Random({rows * 3, cols + 5}, 7), dt), got = dst0.Clone(), ref = dst0.Clone();
    using U = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint16_t>;
    Launch(cu::CopyColumnsKernel<U>, dim3(cu::Blocks(rows * 3 * width)), dim3(cu::kThreads), 0,
           static_cast<const U*>(P<U>(src)), cols, src_col, P<U>(got), cols + 5, int64_t{3},
           rows * 3, width, int64_t{3});
    k::CopyColumns(src, src_col, ref, 3, width, 3);
    Check("CopyColumns (broadcast 3)" + at, dt, got, ref, 0, 0);
  }
  if (rows % 2 == 0) {
    Tensor dst0 = As(Random({rows / 2, width + 2}, 8), dt), got = dst0.Clone(), ref = dst0.Clone();
    Launch(cu::SumColumnsKernel<T>, dim3(cu::Blocks(rows / 2 * width)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(src)), cols, src_col, P<T>(got), width + 2, int64_t{1},
           rows / 2, width, int64_t{2});
    k::SumColumns(src, src_col, ref, 1, width, 2);
    Check("SumColumns (group 2)" + at, dt, got, ref);
  }
  if (bad != 0) {
    std::printf("  rows and columns: bad-index flags %u on in-range indices: FAIL\n", bad);
    ++g_failures;
  }
  Covers({"GatherRowsKernel", "ScatterAddRowsKernel", "CopyColumnsKernel", "SumColumnsKernel"});
}

void Conversions(int64_t n) {
  Tensor x = Random({n}, 9, -300, 300);
  Tensor got = Poisoned({n}, DType::kBF16), ref = Poisoned({n}, DType::kBF16);
  Launch(cu::F32ToBf16Kernel, dim3(cu::Blocks(n)), dim3(cu::kThreads), 0,
         static_cast<const float*>(P<float>(x)), P<bf16>(got), n);
  k::Convert(x, ref);
  Check("F32ToBf16 n=" + std::to_string(n), DType::kBF16, got, ref, 0, 0);
  Tensor back = Poisoned({n}, DType::kF32), back_ref = Poisoned({n}, DType::kF32);
  Launch(cu::Bf16ToF32Kernel, dim3(cu::Blocks(n)), dim3(cu::kThreads), 0,
         static_cast<const bf16*>(P<bf16>(got)), P<float>(back), n);
  k::Convert(ref, back_ref);
  Check("Bf16ToF32 n=" + std::to_string(n), DType::kF32, back, back_ref, 0, 0);
  // The vector kernels, bit for bit, on a grid of 2 blocks (the grid-stride loop goes round).
  Tensor got_v = Poisoned({n}, DType::kBF16), back_v = Poisoned({n}, DType::kF32);
  Launch(cu::F32ToBf16VecKernel, dim3(2), dim3(cu::kThreads), 0,
         static_cast<const float*>(P<float>(x)), P<bf16>(got_v), n);
  Check("F32ToBf16Vec n=" + std::to_string(n), DType::kBF16, got_v, ref, 0, 0);
  Launch(cu::Bf16ToF32VecKernel, dim3(2), dim3(cu::kThreads), 0,
         static_cast<const bf16*>(P<bf16>(got_v)), P<float>(back_v), n);
  Check("Bf16ToF32Vec n=" + std::to_string(n), DType::kF32, back_v, back_ref, 0, 0);
  Covers({"F32ToBf16Kernel", "Bf16ToF32Kernel", "F32ToBf16VecKernel", "Bf16ToF32VecKernel"});
}

// ---- embedding.cu, cross_entropy.cu ----
template <typename T>
void Embedding(int64_t tokens, int64_t d, int64_t vocab) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(tokens) + " tokens, d " + std::to_string(d);
  unsigned bad = 0;
  Tensor table = As(Random({vocab, d}, 10), dt);
  std::vector<int32_t> idv(static_cast<size_t>(tokens));
  moe::Rng rng(11);
  for (auto& v : idv)
    v = static_cast<int32_t>(
        static_cast<int64_t>(rng.Below(static_cast<uint64_t>(vocab / 2))));  // repeats: atomics
  Tensor ids = Ints(idv);
  Tensor out = Poisoned({tokens, d}, dt), ref = Poisoned({tokens, d}, dt);
  Launch(cu::EmbeddingForwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(table)), static_cast<const int32_t*>(P<int32_t>(ids)),
         P<T>(out), tokens, d, vocab, &bad);
  k::EmbeddingForward(table, ids, ref);
  Check("EmbeddingForward" + at, dt, out, ref, 0, 0);
  Tensor dout = As(Random({tokens, d}, 12), dt);
  Tensor dtab = Tensor::Zeros({vocab, d}, DType::kF32),
         dref = Tensor::Zeros({vocab, d}, DType::kF32);
  Launch(cu::EmbeddingBackwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(dout)), static_cast<const int32_t*>(P<int32_t>(ids)),
         P<float>(dtab), tokens, d, vocab, &bad);
  k::EmbeddingBackward(dout, ids, dref);
  Check("EmbeddingBackward" + at, DType::kF32, dtab, dref, 1e-5, 1e-6);
  g_failures += bad != 0;
  Covers({"EmbeddingForwardKernel", "EmbeddingBackwardKernel"});
}

// G: the gradient's storage type (bf16 of fp32 logits: the head's fused cast, bit for bit the
// fp32 gradient rounded once).
template <typename T, typename G = T>
void CrossEntropy(int64_t rows, int64_t vocab) {
  const DType dt = kDt<T>, gt = kDt<G>;
  const std::string at = " " + std::to_string(rows) + "x" + std::to_string(vocab) +
                         (gt != dt ? " (bf16 gradient)" : "");
  unsigned bad = 0;
  Tensor logits = As(Random({rows, vocab}, 13, -4, 4), dt);
  std::vector<int32_t> tv(static_cast<size_t>(rows));
  moe::Rng rng(14);
  for (auto& v : tv)
    v = static_cast<int32_t>(static_cast<int64_t>(rng.Below(static_cast<uint64_t>(vocab))));
  Tensor targets = Ints(tv);
  Tensor dl = Poisoned({rows, vocab}, gt), dref = Poisoned({rows, vocab}, gt);
  std::vector<float> losses(static_cast<size_t>(rows), std::nanf(""));
  Launch(cu::CrossEntropyKernel<T, G>, dim3(static_cast<unsigned>(rows)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(logits)), static_cast<const int32_t*>(P<int32_t>(targets)),
         vocab, 0.5f, P<G>(dl), losses.data(), &bad);
  double loss = 0;
  for (float v : losses) loss += v;
  const double ref = k::CrossEntropy(logits, targets, 0.5, dref);
  Check("CrossEntropy loss" + at, DType::kF32, {loss}, {ref}, 1e-5, 1e-6);
  Check("CrossEntropy dlogits" + at, gt, dl, dref, 1e-4, 1e-6);
  if (gt != dt) {  // the same kernel with an fp32 gradient, rounded afterwards
    Tensor d32 = Poisoned({rows, vocab}, dt);
    Launch(cu::CrossEntropyKernel<T>, dim3(static_cast<unsigned>(rows)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(logits)), static_cast<const int32_t*>(P<int32_t>(targets)),
           vocab, 0.5f, P<T>(d32), losses.data(), &bad);
    Check("CrossEntropy bf16 gradient = fp32 rounded" + at, gt, dl, As(d32, gt), 0, 0);
  }
  g_failures += bad != 0;
  Covers({"CrossEntropyKernel"});
}

// ---- optimizer.cu (launch arguments as AdamW computes them) ----
// The bucket's one-launch AdamW against the CPU's AdamW per segment and Convert: segments with and
// without decay, one of three chunks (past kAdamWChunkElements), a gap (padding) that must stay
// untouched, a sharded master and moments (offsets), the bf16 compute copy written in the pass, and
// a clipping norm read on the device.
template <typename M>
void AdamWBucket() {
  const DType mt = kDt<M>;
  const std::vector<k::AdamWSegment> segs = {
      {100, 357, true}, {357, 420, false}, {500, 500 + 2 * k::kAdamWChunkElements + 77, true}};
  const int64_t numel = segs.back().end + 30, master_offset = 100, moments_offset = 90;
  k::AdamWConfig cfg;
  cfg.lr = 3e-3;
  cfg.weight_decay = 0.1;
  cfg.step = 3;
  std::vector<double> norm = {2.5, 1.5, 0};  // |g|^2 dense, expert, skip word
  cfg.norm_sq = norm.data();
  cfg.grad_clip = 1.0;
  k::AdamWBuffers ref;
  ref.master = Random({numel - master_offset}, 61);
  ref.master_offset = master_offset;
  ref.grad = Random({numel}, 62);
  ref.m = As(Random({numel - moments_offset}, 63, -0.1, 0.1), mt);
  ref.v = As(Random({numel - moments_offset}, 64, 0, 0.01), mt);
  ref.moments_offset = moments_offset;
  ref.compute = As(Random({numel}, 65), DType::kBF16);
  k::AdamWBuffers got = ref;
  for (Tensor* t : {&got.master, &got.m, &got.v, &got.compute}) *t = t->Clone();
  const k::AdamWPlan plan = k::MakeAdamWPlan(segs, moe::Device::Cpu());
  k::AdamWMulti(plan, ref, cfg);
  const std::vector<int64_t> table = k::AdamWChunkTable(plan.segments);
  Launch(cu::AdamWMultiKernel<M, bf16>, dim3(static_cast<unsigned>(table.size() / 2)),
         dim3(cu::kThreads), 0, table.data(), P<float>(got.master), master_offset,
         static_cast<const float*>(P<float>(got.grad)), P<M>(got.m), P<M>(got.v), moments_offset,
         P<bf16>(got.compute), cu::AdamWArgsFor(cfg));
  const std::string at =
      " (" + std::to_string(table.size() / 2) + " chunks, moments " + moe::DTypeName(mt) + ")";
  Check("AdamWMulti master" + at, DType::kF32, got.master, ref.master, 1e-5, 1e-7);
  Check("AdamWMulti m" + at, mt, got.m, ref.m, 1e-5, 1e-8);
  Check("AdamWMulti v" + at, mt, got.v, ref.v, 1e-5, 1e-10);
  // The bf16 copy is the kernel's own fp32 result rounded, bit for bit (the CPU's fp32 differs in
  // the last bits, so its rounding may too); the gaps between segments untouched.
  Tensor want = ref.compute.Clone();
  for (const k::AdamWSegment& sg : segs) {
    const Tensor rounded =
        As(got.master.Rows(sg.begin - master_offset, sg.end - master_offset), DType::kBF16);
    std::memcpy(P<bf16>(want) + sg.begin, rounded.raw(), rounded.nbytes());
  }
  Check("AdamWMulti compute = its master rounded (gaps untouched)" + at, DType::kBF16, got.compute,
        want, 0, 0);
  Covers({"AdamWMultiKernel"});
}

template <typename M>
void AdamW(int64_t n) {
  const DType mt = kDt<M>;
  k::AdamWConfig cfg;
  cfg.lr = 3e-3;
  cfg.weight_decay = 0.1;
  cfg.step = 7;
  cfg.grad_scale = 0.8;
  Tensor p = Random({n}, 15), g = Random({n}, 16), m = As(Random({n}, 17, -0.1, 0.1), mt),
         v = As(Random({n}, 18, 0, 0.01), mt);
  Tensor p2 = p.Clone(), m2 = m.Clone(), v2 = v.Clone();
  Launch(cu::AdamWKernel<M>, dim3(cu::Blocks(n)), dim3(cu::kThreads), 0, P<float>(p2),
         static_cast<const float*>(P<float>(g)), P<M>(m2), P<M>(v2), n, cu::AdamWArgsFor(cfg));
  k::AdamW(p, g, m, v, cfg);
  const std::string at = " n=" + std::to_string(n) + " (moments " + moe::DTypeName(mt) + ")";
  Check("AdamW params" + at, DType::kF32, p2, p, 1e-5, 1e-7);
  Check("AdamW m" + at, mt, m2, m, 1e-5, 1e-8);
  Check("AdamW v" + at, mt, v2, v, 1e-5, 1e-10);
  Covers({"AdamWKernel"});
}

// ---- permute.cu: the plan from the host (the routing kernels have gpu_routing_emulated) ----
// The 16-byte vector kernels: bit for bit the scalar kernels' values (CombineBackward's weight
// gradient sums in another order: against the CPU), on a grid of 2 blocks for the loops.
template <typename T>
void PermuteVectors(int64_t tokens, int64_t k_, const Tensor& ros, const Tensor& dxp,
                    const Tensor& w, int64_t d, const std::string& at0) {
  const DType dt = kDt<T>;
  const std::string at = at0 + ", vectors";
  const int64_t slots = tokens * k_, vecs = tokens * d / cu::Vec16<T>::kLanes;
  const auto* rows = static_cast<const int32_t*>(P<int32_t>(ros));
  const auto* x = static_cast<const T*>(P<T>(dxp));
  const auto* wt = static_cast<const T*>(P<T>(w));
  {
    Tensor got = Poisoned({tokens, d}, dt), ref = Poisoned({tokens, d}, dt);
    Launch(cu::PermuteBackwardVecKernel<T>, dim3(std::min(2u, cu::Blocks(vecs))),
           dim3(cu::kThreads), 0, x, rows, P<T>(got), tokens, k_, d);
    Launch(cu::PermuteBackwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0, x,
           rows, P<T>(ref), tokens, k_, d);
    Check("PermuteBackwardVec = PermuteBackward" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor y0 = As(Random({tokens, d}, 23), dt), got = y0.Clone(), ref = y0.Clone();
    Launch(cu::CombineForwardVecKernel<T>, dim3(std::min(2u, cu::Blocks(vecs))), dim3(cu::kThreads),
           0, x, rows, wt, P<T>(got), tokens, k_, d);
    Launch(cu::CombineForwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0, x,
           rows, wt, P<T>(ref), tokens, k_, d);
    Check("CombineForwardVec = CombineForward" + at, dt, got, ref, 0, 0);
  }
  {
    Tensor dy = As(Random({tokens, d}, 24), dt);
    const auto* g = static_cast<const T*>(P<T>(dy));
    Tensor dyp = Poisoned({slots, d}, dt), dyp_ref = Poisoned({slots, d}, dt);
    Tensor dw = Poisoned({tokens, k_}, dt), dw_ref = Poisoned({tokens, k_}, dt);
    Launch(cu::CombineBackwardVecKernel<T>, dim3(static_cast<unsigned>(slots)), dim3(cu::kThreads),
           0, g, x, rows, wt, P<T>(dyp), P<T>(dw), k_, d);
    Launch(cu::CombineBackwardKernel<T>, dim3(static_cast<unsigned>(slots)), dim3(cu::kThreads), 0,
           g, x, rows, wt, P<T>(dyp_ref), P<T>(dw_ref), k_, d);
    Check("CombineBackwardVec dyp = CombineBackward's" + at, dt, dyp, dyp_ref, 0, 0);
    k::CombineBackward(dy, dxp, ros, w, Poisoned({slots, d}, dt), dw_ref);
    Check("CombineBackwardVec dw" + at, dt, dw, dw_ref, 1e-4, 1e-5);
  }
  Covers({"PermuteBackwardVecKernel", "CombineForwardVecKernel", "CombineBackwardVecKernel"});
}

template <typename T>
void Permute(int64_t tokens, int64_t k_, int64_t experts, int64_t d) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(tokens) + " tokens, top-" + std::to_string(k_);
  std::vector<int32_t> idx(static_cast<size_t>(tokens * k_));
  for (int64_t t = 0; t < tokens; ++t)  // expert experts-1 gets nothing (an empty expert)
    for (int64_t j = 0; j < k_; ++j)
      idx[static_cast<size_t>(t * k_ + j)] = static_cast<int32_t>((t + j * 3) % (experts - 1));
  const k::DispatchPlan plan = k::BuildDispatchPlan(idx.data(), tokens, k_, experts);
  Tensor ros = Tensor::FromVector<int32_t>(plan.row_of_slot, {tokens, k_});
  const int64_t slots = tokens * k_;
  Tensor dxp = As(Random({slots, d}, 19), dt), w = As(Random({tokens, k_}, 20), dt);
  {
    Tensor got = Poisoned({tokens, d}, dt), ref = Poisoned({tokens, d}, dt);
    Launch(cu::PermuteBackwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(dxp)), static_cast<const int32_t*>(P<int32_t>(ros)),
           P<T>(got), tokens, k_, d);
    k::PermuteBackward(dxp, ros, ref);
    Check("PermuteBackward" + at, dt, got, ref, 1e-5, 1e-6);
  }
  {
    Tensor y0 = As(Random({tokens, d}, 21), dt), got = y0.Clone(), ref = y0.Clone();
    Launch(cu::CombineForwardKernel<T>, dim3(cu::Blocks(tokens * d)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(dxp)), static_cast<const int32_t*>(P<int32_t>(ros)),
           static_cast<const T*>(P<T>(w)), P<T>(got), tokens, k_, d);
    k::CombineForward(dxp, ros, w, ref);
    Check("CombineForward" + at, dt, got, ref, 1e-5, 1e-6);
  }
  {
    Tensor dy = As(Random({tokens, d}, 22), dt);
    Tensor dyp = Poisoned({slots, d}, dt), dyp_ref = Poisoned({slots, d}, dt);
    Tensor dw = Poisoned({tokens, k_}, dt), dw_ref = Poisoned({tokens, k_}, dt);
    Launch(cu::CombineBackwardKernel<T>, dim3(static_cast<unsigned>(slots)), dim3(cu::kThreads), 0,
           static_cast<const T*>(P<T>(dy)), static_cast<const T*>(P<T>(dxp)),
           static_cast<const int32_t*>(P<int32_t>(ros)), static_cast<const T*>(P<T>(w)), P<T>(dyp),
           P<T>(dw), k_, d);
    k::CombineBackward(dy, dxp, ros, w, dyp_ref, dw_ref);
    Check("CombineBackward dyp" + at, dt, dyp, dyp_ref, 1e-5, 1e-6);
    Check("CombineBackward dw" + at, dt, dw, dw_ref, 1e-4, 1e-5);
  }
  Covers({"PermuteBackwardKernel", "CombineForwardKernel", "CombineBackwardKernel"});
  if (d % cu::Vec16<T>::kLanes == 0) PermuteVectors<T>(tokens, k_, ros, dxp, w, d, at);
}

// ---- rmsnorm.cu, swiglu.cu, rope.cu ----
template <typename T>
void RmsNorm(int64_t rows, int64_t d) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(rows) + "x" + std::to_string(d);
  Tensor x = As(Random({rows, d}, 23), dt), w = As(Random({d}, 24, 0.5, 1.5), dt);
  Tensor y = Poisoned({rows, d}, dt), yr = Poisoned({rows, d}, dt);
  Tensor rstd = Poisoned({rows}, DType::kF32), rstd_ref = Poisoned({rows}, DType::kF32);
  Launch(cu::RmsNormForwardKernel<T>, dim3(static_cast<unsigned>(rows)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(x)), static_cast<const T*>(P<T>(w)), 1e-6f, P<T>(y),
         P<float>(rstd), d);
  k::RmsNormForward(x, w, 1e-6, yr, rstd_ref);
  Check("RmsNormForward y" + at, dt, y, yr, 1e-5, 1e-6);
  Check("RmsNormForward rstd" + at, DType::kF32, rstd, rstd_ref, 1e-5, 1e-6);
  Tensor dy = As(Random({rows, d}, 25), dt);
  Tensor dx = Poisoned({rows, d}, dt), dxr = Poisoned({rows, d}, dt);
  Tensor dw = Tensor::Zeros({d}, DType::kF32), dwr = Tensor::Zeros({d}, DType::kF32);
  const unsigned blocks = static_cast<unsigned>((rows + cu::kRowsPerBlock - 1) / cu::kRowsPerBlock);
  Launch(cu::RmsNormBackwardKernel<T>, dim3(blocks), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(dy)), static_cast<const T*>(P<T>(x)),
         static_cast<const T*>(P<T>(w)), static_cast<const float*>(P<float>(rstd_ref)),
         static_cast<const T*>(nullptr), P<T>(dx), P<float>(dw), rows, d, cu::kRowsPerBlock);
  k::RmsNormBackward(dy, x, w, rstd_ref, dxr, dwr);
  Check("RmsNormBackward dx" + at, dt, dx, dxr, 1e-4, 1e-6);
  Check("RmsNormBackward dw" + at, DType::kF32, dw, dwr, 1e-4, 1e-5);
  // With the residual's gradient added in the same pass: the kernel's plain dx plus dres, rounded
  // as RmsNormBackward then Add round (bit for bit), and the CPU's two passes.
  Tensor dres = As(Random({rows, d}, 26), dt);
  Tensor dx2 = Poisoned({rows, d}, dt), dx2r = Poisoned({rows, d}, dt), sum = dx.Clone();
  Tensor dw2 = Tensor::Zeros({d}, DType::kF32), dw2r = Tensor::Zeros({d}, DType::kF32);
  Launch(cu::RmsNormBackwardKernel<T>, dim3(blocks), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(dy)), static_cast<const T*>(P<T>(x)),
         static_cast<const T*>(P<T>(w)), static_cast<const float*>(P<float>(rstd_ref)),
         static_cast<const T*>(P<T>(dres)), P<T>(dx2), P<float>(dw2), rows, d, cu::kRowsPerBlock);
  Launch(cu::AddKernel<T>, dim3(cu::Blocks(rows * d)), dim3(cu::kThreads), 0, P<T>(sum),
         static_cast<const T*>(P<T>(dx)), static_cast<const T*>(P<T>(dres)), rows * d);
  Check("RmsNormBackward + residual = then Add" + at, dt, dx2, sum, 0, 0);
  k::RmsNormBackwardAdd(dy, x, w, rstd_ref, dres, dx2r, dw2r);
  Check("RmsNormBackward + residual dx" + at, dt, dx2, dx2r, 1e-4, 1e-6);
  Check("RmsNormBackward + residual dw" + at, DType::kF32, dw2, dw2r, 1e-4, 1e-5);
  // The residual add fused into the forward: the sum as Add stores it, the norm of that sum.
  Tensor r = As(Random({rows, d}, 27), dt);
  Tensor s = Poisoned({rows, d}, dt), sr = Poisoned({rows, d}, dt);
  Tensor y2 = Poisoned({rows, d}, dt), y2r = Poisoned({rows, d}, dt);
  Tensor rs2 = Poisoned({rows}, DType::kF32), rs2r = Poisoned({rows}, DType::kF32);
  Launch(cu::AddRmsNormForwardKernel<T>, dim3(static_cast<unsigned>(rows)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(x)), static_cast<const T*>(P<T>(r)),
         static_cast<const T*>(P<T>(w)), 1e-6f, P<T>(s), P<T>(y2), P<float>(rs2), d);
  k::AddRmsNormForward(x, r, w, 1e-6, sr, y2r, rs2r);
  Check("AddRmsNormForward sum" + at, dt, s, sr, 0, 0);
  Check("AddRmsNormForward y" + at, dt, y2, y2r, 1e-5, 1e-6);
  Check("AddRmsNormForward rstd" + at, DType::kF32, rs2, rs2r, 1e-5, 1e-6);
  Covers({"RmsNormForwardKernel", "RmsNormBackwardKernel", "AddRmsNormForwardKernel"});
}

template <typename T>
void Swiglu(int64_t rows, int64_t f) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(rows) + "x" + std::to_string(f);
  Tensor gu = As(Random({rows, 2 * f}, 26, -3, 3), dt), dout = As(Random({rows, f}, 27), dt);
  Tensor out = Poisoned({rows, f}, dt), ref = Poisoned({rows, f}, dt);
  Launch(cu::SwigluForwardKernel<T>, dim3(cu::Blocks(rows * f)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(gu)), P<T>(out), rows, f);
  k::SwigluForward(gu, ref);
  Check("SwigluForward" + at, dt, out, ref);
  Tensor dgu = Poisoned({rows, 2 * f}, dt), dref = Poisoned({rows, 2 * f}, dt);
  Launch(cu::SwigluBackwardKernel<T>, dim3(cu::Blocks(rows * f)), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(gu)), static_cast<const T*>(P<T>(dout)), P<T>(dgu), rows, f);
  k::SwigluBackward(gu, dout, dref);
  Check("SwigluBackward" + at, dt, dgu, dref);
  Covers({"SwigluForwardKernel", "SwigluBackwardKernel"});
  if (f % cu::Vec16<T>::kLanes != 0) return;
  // The vector kernels, bit for bit against the scalar ones, on a grid of 2 blocks (the loop goes
  // round).
  Tensor vout = Poisoned({rows, f}, dt), vdgu = Poisoned({rows, 2 * f}, dt);
  Launch(cu::SwigluForwardVecKernel<T>, dim3(2), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(gu)), P<T>(vout), rows, f);
  Check("SwigluForwardVec = scalar" + at, dt, vout, out, 0, 0);
  Launch(cu::SwigluBackwardVecKernel<T>, dim3(2), dim3(cu::kThreads), 0,
         static_cast<const T*>(P<T>(gu)), static_cast<const T*>(P<T>(dout)), P<T>(vdgu), rows, f);
  Check("SwigluBackwardVec = scalar" + at, dt, vdgu, dgu, 0, 0);
  Covers({"SwigluForwardVecKernel", "SwigluBackwardVecKernel"});
}

template <typename T>
void Rope(int64_t tokens, int64_t seq, int64_t heads, int64_t stride, int64_t offset, int64_t pairs,
          k::RopeLayout layout, bool inverse, int64_t first = 0) {
  const DType dt = kDt<T>;
  const std::string at =
      std::string(layout == k::RopeLayout::kHalfSplit ? " half-split" : " pairs") +
      (inverse ? " backward " : " forward ") + std::to_string(tokens) + " tokens from position " +
      std::to_string(first);
  Tensor inv_freq = Random({pairs}, 28, 0.001, 1.0);
  Tensor x = As(Random({tokens, heads * stride}, 29), dt), got = x.Clone(), ref = x.Clone();
  Launch(cu::RopeKernel<T>, dim3(cu::Blocks(tokens * pairs)), dim3(cu::kThreads), 0, P<T>(got),
         tokens, seq, heads, stride, offset, static_cast<const float*>(P<float>(inv_freq)), pairs,
         layout == k::RopeLayout::kHalfSplit, inverse ? -1.0 : 1.0, first);
  if (inverse) {
    k::RopeBackward(ref, seq, heads, offset, inv_freq, layout, first);
  } else {
    k::RopeForward(ref, seq, heads, offset, inv_freq, layout, first);
  }
  Check("Rope" + at, dt, got, ref, 1e-5, 1e-6);
  Covers({"RopeKernel"});
}

// ---- router.cu (fp32 only, as the router runs) ----
// levels > 0: the logits take that many values only and the bias is 0, so that many scores tie
// (the lower index must win, as on the CPU).
void Router(int64_t tokens, int64_t experts, const k::RouterConfig& cfg, const char* what,
            int levels = 0) {
  const std::string at = std::string(" ") + what;
  Tensor logits = Random({tokens, experts}, 30, -3, 3), bias = Random({experts}, 31, -0.2, 0.2);
  if (levels > 0) {
    for (int64_t i = 0; i < logits.numel(); ++i)
      logits.data<float>()[i] = std::floor((logits.data<float>()[i] + 3) / 6 * levels);
    k::Fill(bias, 0.0);
  }
  Tensor s = Poisoned({tokens, experts}, DType::kF32),
         sr = Poisoned({tokens, experts}, DType::kF32);
  Tensor idx = Poisoned({tokens, cfg.top_k}, DType::kI32),
         idxr = Poisoned({tokens, cfg.top_k}, DType::kI32);
  Tensor w = Poisoned({tokens, cfg.top_k}, DType::kF32),
         wr = Poisoned({tokens, cfg.top_k}, DType::kF32);
  Launch(cu::RouteWarpKernel,
         dim3(static_cast<unsigned>((tokens + cu::kRouteWarps - 1) / cu::kRouteWarps)),
         dim3(32 * cu::kRouteWarps), 0, static_cast<const float*>(P<float>(logits)),
         static_cast<const float*>(P<float>(bias)), tokens, experts, cfg.top_k, cfg.num_groups,
         cfg.topk_groups, cfg.sigmoid, static_cast<float>(cfg.route_scale), cfg.use_bias,
         P<float>(s), P<int32_t>(idx), P<float>(w));
  k::RouterForward(logits, bias, cfg, sr, idxr, wr);
  // Sigmoid scores are computed element by element as on the CPU: bit for bit; softmax's sum is the
  // warp's tree (an ulp from the CPU's in-order sum).
  const double tol = cfg.sigmoid ? 0 : 1e-5, atol = cfg.sigmoid ? 0 : 1e-6;
  Check("RouterForward scores" + at, DType::kF32, s, sr, tol, atol);
  Check("RouterForward top-k ids" + at, DType::kI32, idx, idxr, 0, 0);
  Check("RouterForward weights" + at, DType::kF32, w, wr, tol, atol);
  Tensor dw = Random({tokens, cfg.top_k}, 32), extra = Random({tokens, experts}, 33);
  Tensor dl = Poisoned({tokens, experts}, DType::kF32),
         dlr = Poisoned({tokens, experts}, DType::kF32);
  Launch(cu::RouteBackwardWarpKernel,
         dim3(static_cast<unsigned>((tokens + cu::kRouteWarps - 1) / cu::kRouteWarps)),
         dim3(32 * cu::kRouteWarps), 0, static_cast<const float*>(P<float>(sr)),
         static_cast<const int32_t*>(P<int32_t>(idxr)), static_cast<const float*>(P<float>(dw)),
         static_cast<const float*>(P<float>(extra)), tokens, experts, cfg.top_k, cfg.sigmoid,
         static_cast<float>(cfg.route_scale), P<float>(dl));
  k::RouterBackward(sr, idxr, dw, extra, cfg, dlr);
  // The same formulas; compilers contract their multiply-adds differently (an ulp), and softmax's
  // dot product is the warp's tree.
  Check("RouterBackward" + at, DType::kF32, dl, dlr, 1e-5, 1e-6);
  Covers({"RouteWarpKernel", "RouteBackwardWarpKernel"});
}

// from_zero: the gradient alone is compared (its size sets the tolerance); else it is added to
// random values (the accumulation).
void SeqAux(int64_t seqs, int64_t seq_len, int64_t experts, int64_t top_k, int levels = 0,
            bool from_zero = true) {
  const std::string at = " " + std::to_string(seqs) + " x " + std::to_string(seq_len) + ", " +
                         std::to_string(experts) + " experts" + (levels ? " (ties)" : "");
  const int64_t tokens = seqs * seq_len;
  Tensor scores = Random({tokens, experts}, 34, 0.01, 1);
  if (levels > 0) {  // a few values only: the counts' ties must go to the lower index
    for (int64_t i = 0; i < scores.numel(); ++i)
      scores.data<float>()[i] = (1 + std::floor(scores.data<float>()[i] * levels)) / levels;
  }
  Tensor ds0 = from_zero ? Tensor::Zeros({tokens, experts}, DType::kF32)
                         : Random({tokens, experts}, 35),
         ds = ds0.Clone(), dsr = ds0.Clone();
  const double coeff = from_zero ? 1.0 : 0.01;
  Tensor sums = Poisoned({tokens}, DType::kF32), f = Poisoned({seqs * experts}, DType::kF32);
  Tensor partial = Poisoned({seqs * cu::SeqAuxChunks(seq_len) * experts}, DType::kF32);
  std::vector<int> counts(static_cast<size_t>(seqs * experts), 0);
  std::vector<float> losses(static_cast<size_t>(seqs), std::nanf(""));
  const cu::SeqAuxBuffers b{P<float>(sums), P<float>(partial), P<float>(f),
                            losses.data(),  P<float>(ds),      counts.data()};
  cu::SeqAuxSteps(static_cast<const float*>(P<float>(scores)), seqs, seq_len, experts, top_k,
                  static_cast<float>(coeff), b,
                  [](auto kernel, dim3 grid, dim3 block, auto... args) {
                    Launch(kernel, grid, block, 0, args...);
                  });
  double loss = 0;
  for (float v : losses) loss += v;
  const double ref = k::SeqAuxLoss(scores, top_k, seqs, seq_len, coeff, dsr);
  Check("SeqAuxLoss loss" + at, DType::kF32, {loss}, {ref}, 1e-5, 1e-9);
  // From zero: normwise (an element near f_i = the token's mean cancels), 1e-5 of the largest.
  double gmax = 0;
  for (double v : Values(dsr)) gmax = std::max(gmax, std::fabs(v));
  Check("SeqAuxLoss dscores" + at, DType::kF32, ds, dsr, from_zero ? 1e-4 : 1e-5,
        from_zero ? 1e-5 * gmax : 1e-7);
  Covers({"SeqAuxCountKernel", "SeqAuxProbKernel", "SeqAuxLossKernel", "SeqAuxGradKernel"});
}

// ---- fp8.cu, fp8_gemm.cu: bit for bit against the CPU's codec ----
template <typename T>
void QuantDequant(int64_t rows, int64_t cols, int64_t tr, int64_t tc, bool pow2) {
  const DType dt = kDt<T>;
  const std::string at = " " + std::to_string(rows) + "x" + std::to_string(cols) + " tiles " +
                         std::to_string(tr) + "x" + std::to_string(tc) + (pow2 ? " mxfp8" : "");
  Tensor x = As(Random({rows, cols}, 36, -20, 20), dt);
  Tensor got = Poisoned({rows, cols}, DType::kF32), ref = Poisoned({rows, cols}, DType::kF32);
  const dim3 grid(static_cast<unsigned>((rows + tr - 1) / tr),
                  static_cast<unsigned>((cols + tc - 1) / tc));
  Launch(cu::QuantDequantKernel<T>, grid, dim3(cu::kTileThreads), 0, static_cast<const T*>(P<T>(x)),
         P<float>(got), int64_t{0}, rows, cols, tr, tc, pow2, int64_t{0});
  k::Fp8QuantDequant(x, tr, tc, ref, {}, pow2);
  Check("Fp8QuantDequant" + at, dt, Values(got), Values(ref), 0, 0);
  Covers({"QuantDequantKernel"});
}

// x [rows, cols] quantised as cuBLASLt's operands, against fp8::Quantize of the operand's matrix
// (x, or its transpose): the e4m3 bytes and the scales, in the kernels' layouts.
template <typename T>
void Fp8Operands(int64_t rows, int64_t cols, bool transpose) {
  const DType dt = kDt<T>;
  const std::string at =
      " " + std::to_string(rows) + "x" + std::to_string(cols) + (transpose ? " transposed" : "");
  Tensor x = As(Random({rows, cols}, 37, -5, 5), dt);
  const std::vector<double> xv = Values(x);
  const int64_t outer = transpose ? cols : rows, red = transpose ? rows : cols;
  std::vector<float> op(static_cast<size_t>(outer * red));  // the operand, [outer, red]
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < red; ++i)
      op[static_cast<size_t>(o * red + i)] =
          static_cast<float>(xv[static_cast<size_t>(transpose ? i * cols + o : o * cols + i)]);
  const int64_t kb = cu::kBlock, lb = (red + kb - 1) / kb;
  {  // 1 x 128 tiles, the outer dimension padded to 16 and the reduction to 128 (QuantVec128)
    const int64_t outer_pad = (outer + 15) / 16 * 16, red_pad = lb * kb;
    std::vector<uint8_t> q(static_cast<size_t>(outer_pad * red_pad), 0xAA);
    std::vector<float> sc(static_cast<size_t>(outer_pad * lb), std::nanf(""));
    if (transpose) {  // as fp8_gemm.cu QuantVec128 launches them
      const unsigned ob =
          static_cast<unsigned>((outer_pad + cu::kVecOuterTile - 1) / cu::kVecOuterTile);
      Launch(cu::QuantVec128TransposedKernel<T>, dim3(ob, static_cast<unsigned>(lb)), dim3(kb), 0,
             static_cast<const T*>(P<T>(x)), rows, cols, outer_pad, red_pad, q.data(), sc.data());
    } else {
      Launch(cu::QuantVec128Kernel<T>,
             dim3(static_cast<unsigned>(outer_pad), static_cast<unsigned>(lb)), dim3(kb), 0,
             static_cast<const T*>(P<T>(x)), rows, cols, outer_pad, red_pad, q.data(), sc.data());
    }
    const auto ref = k::fp8::Quantize(op.data(), outer, red, 1, kb);
    std::vector<double> got_q, ref_q, got_s, ref_s;
    for (int64_t o = 0; o < outer_pad; ++o) {
      for (int64_t i = 0; i < red_pad; ++i) {
        got_q.push_back(q[static_cast<size_t>(o * red_pad + i)]);
        const bool in = o < outer && i < red;
        ref_q.push_back(in ? ref.values[static_cast<size_t>(o * red + i)] : 0);
      }
      for (int64_t l = 0; l < lb; ++l) {
        got_s.push_back(sc[static_cast<size_t>(l * outer_pad + o)]);
        ref_s.push_back(o < outer ? ref.scales[static_cast<size_t>(o * lb + l)] : 1.0);
      }
    }
    Check("Fp8 1x128 operand e4m3" + at, DType::kF32, got_q, ref_q, 0, 0);
    Check("Fp8 1x128 operand scales" + at, DType::kF32, got_s, ref_s, 0, 0);
  }
  {  // 128 x 128 blocks; scales outer-block-major, the reduction blocks padded to 4 (QuantBlk128)
    const int64_t ob = (outer + kb - 1) / kb, l4 = (lb + 3) / 4 * 4;
    std::vector<uint8_t> q(static_cast<size_t>(outer * red), 0xAA);
    std::vector<float> sc(static_cast<size_t>(ob * l4), std::nanf(""));
    Launch(cu::QuantBlk128Kernel<T>, dim3(static_cast<unsigned>(ob), static_cast<unsigned>(lb)),
           dim3(kb), 0, static_cast<const T*>(P<T>(x)), rows, cols, transpose, l4, q.data(),
           sc.data());
    const auto ref = k::fp8::Quantize(op.data(), outer, red, kb, kb);
    std::vector<double> got_q(q.begin(), q.end()), ref_q(ref.values.begin(), ref.values.end());
    std::vector<double> got_s(sc.begin(), sc.end()), ref_s;
    for (int64_t b = 0; b < ob; ++b)
      for (int64_t l = 0; l < l4; ++l)
        ref_s.push_back(l < lb ? ref.scales[static_cast<size_t>(b * lb + l)] : 1.0);
    Check("Fp8 128x128 operand e4m3" + at, DType::kF32, got_q, ref_q, 0, 0);
    Check("Fp8 128x128 operand scales" + at, DType::kF32, got_s, ref_s, 0, 0);
  }
  Covers({transpose ? "QuantVec128TransposedKernel" : "QuantVec128Kernel", "QuantBlk128Kernel"});
}

// ---- latent_attention.cu: decoding over the latent cache ----
// n queries at the end of a cache of `total` rows (causal: query i sees rows 0..total - n + i),
// with the launch shape and shared memory of LatentAttentionDecode, against the CPU path.
template <typename T>
void LatentDecode(int64_t n, int64_t total, int64_t heads, int64_t d, int64_t dv) {
  const DType dt = kDt<T>;
  const std::string at = " n=" + std::to_string(n) + " of " + std::to_string(total) + ", " +
                         std::to_string(heads) + " heads, d " + std::to_string(d);
  Tensor q = As(Random({n, heads * d}, 81), dt), cache = As(Random({total, d}, 82), dt);
  Tensor got = Poisoned({n, heads * dv}, dt), ref = Poisoned({n, heads * dv}, dt);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const size_t smem = static_cast<size_t>(32 + d + total) * sizeof(float);
  Launch(cu::LatentDecodeKernel<T>, dim3(static_cast<unsigned>(n * heads)),
         dim3(cu::kDecodeThreads), smem, static_cast<const T*>(P<T>(q)),
         static_cast<const T*>(P<T>(cache)), P<T>(got), n, total, d, heads, dv,
         static_cast<float>(scale));
  k::LatentAttentionDecode(q, cache, heads, dv, scale, ref);
  Check("LatentDecode" + at, dt, got, ref, 1e-5, 1e-6);
  Covers({"LatentDecodeKernel"});
}

// ---- runtime.cu, gemm.cu: the small kernels ----
void SmallKernels() {
  unsigned flags = k::kBadTarget | k::kBadExpert;
  double dst = -1;
  Launch(cu::FoldBadIndicesKernel, dim3(1), dim3(1), 0, &flags, &dst);
  Check("FoldBadIndices (value, then cleared)", DType::kF32, {dst, static_cast<double>(flags)},
        {static_cast<double>(k::kBadTarget | k::kBadExpert), 0}, 0, 0);
  std::vector<float> partial = {0.5f, 1.25f, -3.f, 1e-3f, 7.f};
  double acc = 10;
  Launch(cu::AddPartialsKernel<float>, dim3(1), dim3(1), 0,
         static_cast<const float*>(partial.data()), static_cast<int64_t>(partial.size()), &acc);
  double ref = 10;
  double in_order = 0;
  for (float v : partial) in_order += v;
  ref += in_order;
  Check("AddPartials (in order, in double)", DType::kF32, {acc}, {ref}, 0, 0);
  // Many partials: the block's tree against the in-order sum (rounding apart), twice the same.
  std::vector<float> many(16411);
  moe::Rng rng(71);
  for (float& v : many) v = static_cast<float>(rng.Uniform() * 2 - 1);
  double tree = 0.25, again = 0.25, in_order_many = 0.25;
  for (double* dst : {&tree, &again})
    Launch(cu::ReducePartialsKernel<float>, dim3(1), dim3(cu::kThreads), 0,
           static_cast<const float*>(many.data()), static_cast<int64_t>(many.size()), dst);
  for (float v : many) in_order_many += v;
  Check("ReducePartials (16,411, a tree)", DType::kF32, {tree}, {in_order_many}, 1e-12, 1e-12);
  Check("ReducePartials (the same twice)", DType::kF32, {tree}, {again}, 0, 0);
  cu::PiecePointers pp{};
  std::vector<int> storage(3 * cu::kMaxPieces);
  const int n = 77;  // fewer pieces than threads
  for (int i = 0; i < n; ++i) {
    pp.a[i] = &storage[static_cast<size_t>(i)];
    pp.b[i] = &storage[static_cast<size_t>(cu::kMaxPieces + i)];
    pp.c[i] = &storage[static_cast<size_t>(2 * cu::kMaxPieces + i)];
  }
  std::vector<const void*> a(cu::kMaxPieces, nullptr), b(cu::kMaxPieces, nullptr);
  std::vector<void*> c(cu::kMaxPieces, nullptr);
  Launch(cu::WritePointersKernel, dim3(1), dim3(cu::kMaxPieces), 0, pp, n, a.data(), b.data(),
         c.data());
  int wrong = 0;
  for (int i = 0; i < cu::kMaxPieces; ++i) {
    const bool in = i < n;
    wrong += a[static_cast<size_t>(i)] != (in ? pp.a[i] : nullptr);
    wrong += b[static_cast<size_t>(i)] != (in ? pp.b[i] : nullptr);
    wrong += c[static_cast<size_t>(i)] != (in ? pp.c[i] : nullptr);
  }
  Check("WritePointers (77 of 128 pieces)", DType::kF32, {static_cast<double>(wrong)}, {0.0}, 0, 0);
  Covers(
      {"FoldBadIndicesKernel", "AddPartialsKernel", "ReducePartialsKernel", "WritePointersKernel"});
}

// ---- the list ----
// The kernels the cases above run (Covers records what actually ran; a full run fails when the two
// differ, so `--list`, which prints this table without running anything, stays true).
const std::set<std::string> kRunHere = {"LatentDecodeKernel",
                                        "AddVecKernel",
                                        "AxpyVecKernel",
                                        "ScaleVecKernel",
                                        "F32ToBf16VecKernel",
                                        "Bf16ToF32VecKernel",
                                        "AdamWMultiKernel",
                                        "AddRmsNormForwardKernel",
                                        "ReducePartialsKernel",
                                        "FillKernel",
                                        "UniformKernel",
                                        "AxpyKernel",
                                        "AddKernel",
                                        "ScaleKernel",
                                        "SumSquaresKernel",
                                        "GatherRowsKernel",
                                        "ScatterAddRowsKernel",
                                        "CopyColumnsKernel",
                                        "SumColumnsKernel",
                                        "F32ToBf16Kernel",
                                        "Bf16ToF32Kernel",
                                        "EmbeddingForwardKernel",
                                        "EmbeddingBackwardKernel",
                                        "CrossEntropyKernel",
                                        "AdamWKernel",
                                        "PermuteBackwardKernel",
                                        "CombineForwardKernel",
                                        "CombineBackwardKernel",
                                        "PermuteBackwardVecKernel",
                                        "CombineForwardVecKernel",
                                        "CombineBackwardVecKernel",
                                        "RmsNormForwardKernel",
                                        "RmsNormBackwardKernel",
                                        "SwigluForwardKernel",
                                        "SwigluBackwardKernel",
                                        "SwigluForwardVecKernel",
                                        "SwigluBackwardVecKernel",
                                        "RopeKernel",
                                        "RouteWarpKernel",
                                        "RouteBackwardWarpKernel",
                                        "SeqAuxCountKernel",
                                        "SeqAuxProbKernel",
                                        "SeqAuxLossKernel",
                                        "SeqAuxGradKernel",
                                        "QuantDequantKernel",
                                        "QuantVec128Kernel",
                                        "QuantVec128TransposedKernel",
                                        "QuantBlk128Kernel",
                                        "FoldBadIndicesKernel",
                                        "AddPartialsKernel",
                                        "WritePointersKernel"};
// Kernels another emulated test runs (by the header they live in).
const std::map<std::string, std::string> kElsewhere = {
    {"attention_kernels.cuh", "gpu_attention_emulated"},
    {"routing_kernels.cuh", "gpu_routing_emulated"},
};
// Kernels the emulator does not run yet, with the reason (library calls are listed below for
// completeness, as they are GPU work with no kernel of ours).
const std::map<std::string, std::string> kNotEmulated = {};

// Every __global__ kernel of the sources, with the file it is in.
std::vector<std::pair<std::string, std::string>> KernelsIn(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::regex re(
      R"(__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\()");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".cu" || ext == ".cuh") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
      out.emplace_back((*it)[1].str(), f.filename().string());
  }
  return out;
}

int List(const std::filesystem::path& dir) {
  const auto kernels = KernelsIn(dir);
  int unlisted = 0;
  std::printf("\nThe CUDA kernels of %s (%zu):\n", dir.string().c_str(), kernels.size());
  for (const auto& [name, file] : kernels) {
    if (kRunHere.count(name)) {
      std::printf("emulated: %s (%s, here)\n", name.c_str(), file.c_str());
    } else if (auto e = kElsewhere.find(file); e != kElsewhere.end()) {
      std::printf("emulated: %s (%s, by %s)\n", name.c_str(), file.c_str(), e->second.c_str());
    } else if (auto n = kNotEmulated.find(name); n != kNotEmulated.end()) {
      std::printf("not emulated: %s: %s\n", name.c_str(), n->second.c_str());
    } else {
      std::printf("UNLISTED: %s (%s): neither emulated nor listed with a reason\n", name.c_str(),
                  file.c_str());
      ++unlisted;
    }
  }
  std::printf(
      "(GPU work that is no kernel of ours, not emulated: cublasGemmEx and "
      "cublasGemmGroupedBatchedEx (gemm.cu), cublasLtMatmul (fp8_gemm.cu): NVIDIA's libraries; "
      "gpu_kernel_check runs them on a GPU)\n");
  if (kernels.size() < 20) {
    std::printf("FAIL: only %zu kernels found in %s (is it kernels/cuda?)\n", kernels.size(),
                dir.string().c_str());
    return 1;
  }
  return unlisted;
}

}  // namespace

int main(int argc, char** argv) {
  const bool list_only = argc == 3 && std::string(argv[1]) == "--list";
  if (argc != 2 && !list_only) {
    std::fprintf(stderr,
                 "usage: %s [--list] KERNELS_CUDA_DIR (the source folder kernels/cuda; --list: "
                 "print the kernels' list without running them)\n",
                 argv[0]);
    return 2;
  }
  if (list_only) return List(argv[2]) == 0 ? 0 : 1;
  const auto t0 = std::chrono::steady_clock::now();
  // Sizes: not multiples of the 256-thread block; one token; a grid smaller than the data.
  for (int64_t n : {1, 257, 3001}) {
    Elementwise<float>(n, 0);
    Elementwise<bf16>(n, 0);
  }
  Elementwise<float>(5000, 3);  // three blocks: the grid-stride loop goes round 7 times
  Elementwise<bf16>(5000, 3);
  RowsAndColumns<float>(37, 19);
  RowsAndColumns<bf16>(37, 19);  // 38-byte rows: gathered in halves
  RowsAndColumns<bf16>(20, 22);  // 44-byte rows: gathered in words
  RowsAndColumns<float>(9, 12);  // 48-byte rows: gathered in 16-byte vectors
  Conversions(1031);
  Embedding<float>(45, 33, 50);
  Embedding<bf16>(1, 7, 3);
  CrossEntropy<float>(5, 1000);
  CrossEntropy<bf16>(3, 333);
  CrossEntropy<float, bf16>(4, 777);
  AdamW<float>(2049);
  AdamW<bf16>(999);
  AdamWBucket<float>();
  AdamWBucket<bf16>();
  Permute<float>(15, 3, 6, 41);
  Permute<bf16>(1, 2, 4, 9);
  Permute<float>(13, 4, 7, 36);   // vectors of 4 floats
  Permute<bf16>(40, 8, 33, 264);  // vectors of 8 bf16; the 2-block grid goes round

  RmsNorm<float>(45, 300);  // two backward strips, the last partial
  RmsNorm<bf16>(1, 65);
  Swiglu<float>(13, 77);
  Swiglu<bf16>(4, 129);
  Swiglu<float>(37, 132);  // f a multiple of 4: the vector kernels too
  Swiglu<bf16>(29, 136);   // a multiple of 8
  Rope<float>(29, 10, 3, 24, 8, 8, k::RopeLayout::kHalfSplit, false);
  Rope<bf16>(29, 10, 3, 24, 8, 8, k::RopeLayout::kPairs, true);
  Rope<float>(3, 3, 3, 24, 8, 8, k::RopeLayout::kPairs, false, /*first=*/57);  // decoding
  k::RouterConfig dsv3;  // sigmoid, bias, group-limited
  dsv3.top_k = 4;
  dsv3.num_groups = 4;
  dsv3.topk_groups = 2;
  dsv3.route_scale = 2.5;
  Router(133, 32, dsv3, "sigmoid, 4 of 4 groups -> top-4 of 32");
  k::RouterConfig softmax;
  softmax.top_k = 2;
  softmax.sigmoid = false;
  softmax.use_bias = false;
  Router(1, 7, softmax, "softmax top-2 of 7, one token");
  k::RouterConfig v3 = dsv3;  // DeepSeek-V3's own: 256 experts, 8 groups, top-4 groups, top-8
  v3.top_k = 8;
  v3.num_groups = 8;
  v3.topk_groups = 4;
  Router(37, 256, v3, "sigmoid, 4 of 8 groups -> top-8 of 256");
  Router(9, 72, v3, "sigmoid, 4 of 8 groups of 9 -> top-8 of 72 (lanes' last slots part empty)");
  softmax.top_k = 40;  // more picks than lanes, from 2 of 16 groups
  softmax.num_groups = 16;
  softmax.topk_groups = 2;
  Router(5, 512, softmax, "softmax, 2 of 16 groups -> top-40 of 512");
  Router(6, 64, v3, "sigmoid, ties: logits on 3 levels", /*levels=*/3);
  k::RouterConfig many = v3;  // more groups than lanes: a lane keeps two groups' scores
  many.top_k = 6;
  many.num_groups = 64;
  many.topk_groups = 40;
  Router(5, 128, many, "sigmoid, 40 of 64 groups of 2 -> top-6 of 128");
  many.num_groups = 64;  // one expert a group: the group's score is its best alone
  many.topk_groups = 9;
  Router(5, 64, many, "sigmoid, 9 of 64 groups of 1 -> top-6 of 64");
  SeqAux(3, 37, 16, 4, 0, /*from_zero=*/false);
  SeqAux(2, 300, 256, 8);    // DeepSeek-V3's experts, ten chunks a sequence (the last partial)
  SeqAux(1, 129, 72, 8, 4);  // ties on 4 score levels; part-empty lane slots
  SeqAux(2, 16, 512, 40);    // every slot of a lane, more picks than lanes
  QuantDequant<float>(37, 300, 1, 128, false);
  QuantDequant<bf16>(257, 260, 128, 128, false);
  QuantDequant<float>(5, 70, 1, 32, true);
  Fp8Operands<float>(37, 300, false);
  Fp8Operands<bf16>(37, 200, true);  // the Wgrad operand: 128 x 1 along the tokens
  Fp8Operands<float>(70, 129, false);
  LatentDecode<float>(3, 200, 4, 40, 32);  // more rows than the block's 128 threads
  LatentDecode<bf16>(1, 5, 2, 24, 16);     // one decoding step, a short cache
  SmallKernels();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& name : kRunHere) {
    if (!g_covered.count(name)) {
      std::printf("FAIL: %s is listed as run here, but no case ran it\n", name.c_str());
      ++g_failures;
    }
  }
  for (const std::string& name : g_covered) {
    if (!kRunHere.count(name)) {
      std::printf("FAIL: a case ran %s, which kRunHere does not list\n", name.c_str());
      ++g_failures;
    }
  }
  const int unlisted = List(argv[1]);
  std::printf("%s: %d of %d comparisons failed, %d kernels unlisted (%.1f s)\n",
              g_failures || unlisted ? "FAIL" : "PASS", g_failures, g_checks, unlisted, secs);
  return g_failures || unlisted ? 1 : 0;
}
