#include "kernels/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

namespace moe::kernels {

// The backends' twins of this family's entry points (kernels/dispatch.h).
MOE_KERNEL_BACKENDS(Fp8QuantDequant)
MOE_CUDA_KERNEL(Fp8GemmForward)
MOE_CUDA_KERNEL(Fp8GemmDgrad)
MOE_CUDA_KERNEL(Fp8GemmWgrad)

void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& row_groups, bool mxfp8) {
  MOE_CHECK(x.ndim() == 2 || x.ndim() == 3)
      << "Fp8QuantDequant: x " << x.ShapeString() << " is not 2-D or 3-D";
  MOE_CHECK(out.shape() == x.shape() && out.dtype() == DType::kF32 && out.device() == x.device())
      << "Fp8QuantDequant: out " << out.ShapeString() << " must be f32 of x's shape "
      << x.ShapeString();
  MOE_CHECK(tile_rows > 0 && tile_cols > 0)
      << "Fp8QuantDequant: tiles of " << tile_rows << " x " << tile_cols;
  const int64_t cols = x.dim(x.ndim() - 1), rows = x.numel() / std::max<int64_t>(cols, 1);
  std::vector<int64_t> groups = row_groups;
  if (x.ndim() == 3) {
    MOE_CHECK(row_groups.empty()) << "Fp8QuantDequant: row_groups with a 3-D x";
    for (int64_t g = 0; g <= x.dim(0); ++g) groups.push_back(g * x.dim(1));
  } else if (groups.empty()) {
    groups = {0, rows};
  }
  MOE_CHECK(groups.front() == 0 && groups.back() == rows &&
            std::is_sorted(groups.begin(), groups.end()))
      << "Fp8QuantDequant: row_groups must run from 0 to " << rows << " in order";
  const Tensor x2 = x.Reshape({rows, cols}), out2 = out.Reshape({rows, cols});
  return MOE_DISPATCH(out, Fp8QuantDequant(x2, tile_rows, tile_cols, out2, groups, mxfp8));
}

#ifdef MOE_WITH_CUDA
namespace {

// The check before use: cuBLASLt's three GEMMs against the emulation (Fp8QuantDequant, then an fp32
// GEMM), on the current device.
constexpr int64_t kFp8Block = 128;

// Random values whose 1 x 128 tiles and 128 x 128 blocks have scales powers of two apart (rows by
// r mod 4, blocks by their position), so that a scale read from the wrong place shows by far more
// than the tolerance.
Tensor RandomOnDevice(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor h = Tensor::Empty({rows, cols}, DType::kF32);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const int e = static_cast<int>((r / kFp8Block + 3 * (c / kFp8Block)) % 5 + r % 4) - 4;
      h.data<float>()[r * cols + c] =
          (static_cast<float>(s >> 40) / 16777216.f - 0.5f) * std::ldexp(1.f, e);
    }
  }
  return h.Clone(cuda::CurrentDevice());
}

// max |a - b| over max |b|, read on the host.
double RelDiff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.ToVector<float>(), y = b.ToVector<float>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return diff / scale;
}

Tensor Emulated(const Tensor& a, bool ta, int64_t atr, int64_t atc, const Tensor& b, bool tb,
                int64_t btr, int64_t btc, int64_t rows, int64_t cols) {
  Tensor qa = Tensor::Empty(a.shape(), DType::kF32, a.device()),
         qb = Tensor::Empty(b.shape(), DType::kF32, b.device());
  Fp8QuantDequant(a, atr, atc, qa, {0, a.dim(0)}, false);
  Fp8QuantDequant(b, btr, btc, qb, {0, b.dim(0)}, false);
  Tensor out = Tensor::Empty({rows, cols}, DType::kF32, a.device());
  Gemm(qa, ta, qb, tb, out);
  return out;
}

// The three GEMMs on awkward sizes against the emulation: 197 tokens (padded to 208 rows, and to
// 256 for the weight gradient), 320 and 576 (partial 128 blocks, as DeepSeek-V3's 576-row kv_a). ""
// or what disagreed. Only the fp32 sums' order differs, and Hopper's FP8 MMA keeps about 14 bits
// within each 128-wide block (DeepSeek-V3, 3.3.2): 1e-3 of the largest value allows that, and a
// misplaced scale (a factor of 2 or more on a tile) is far beyond it.
std::string SelfCheck() {
  const int64_t m = 197, n = 320, k = 576;
  const Tensor x = RandomOnDevice(m, k, 1), w = RandomOnDevice(n, k, 2),
               dy = RandomOnDevice(m, n, 3);
  Tensor y = Tensor::Empty({m, n}, DType::kF32, x.device()),
         dx = Tensor::Empty({m, k}, DType::kF32, x.device()),
         dw = Tensor::Zeros({n, k}, DType::kF32, x.device());
  using Check = std::pair<const char*, std::function<std::string()>>;
  const std::vector<Check> gemms = {
      {"forward", [&] { return cuda::TryFp8Gemm(cuda::Fp8GemmKind::kForward, x, w, y, 0.f); }},
      {"dgrad", [&] { return cuda::TryFp8Gemm(cuda::Fp8GemmKind::kDgrad, dy, w, dx, 0.f); }},
      {"wgrad", [&] { return cuda::TryFp8Gemm(cuda::Fp8GemmKind::kWgrad, dy, x, dw, 1.f); }}};
  for (const auto& [name, fn] : gemms) {
    if (std::string failed = fn(); !failed.empty()) return std::string(name) + ": " + failed;
  }
  const double e[3] = {
      RelDiff(y, Emulated(x, false, 1, kFp8Block, w, true, kFp8Block, kFp8Block, m, n)),
      RelDiff(dx, Emulated(dy, false, 1, kFp8Block, w, false, kFp8Block, kFp8Block, m, k)),
      RelDiff(dw, Emulated(dy, true, kFp8Block, 1, x, false, kFp8Block, 1, n, k))};
  const char* names[3] = {"forward", "dgrad", "wgrad"};
  for (int i = 0; i < 3; ++i) {
    if (!(e[i] <= 1e-3)) {
      return std::string(names[i]) + " differs from the emulation by " + std::to_string(e[i]) +
             " of its largest value (197 x 320 x 576; allowed 1e-3)";
    }
  }
  return "";
}

}  // namespace
#endif

Status Fp8GemmSupport(Device device) {
  if (!device.is_cuda())
    return FailedPreconditionError(
        "FP8 tensor-core GEMMs run on CUDA devices (the CPU emulates FP8)");
#ifdef MOE_WITH_CUDA
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [] {
    problem = cuda::Fp8GemmProblem();
    if (!problem.empty()) return;
    problem = SelfCheck();
    if (!problem.empty())
      problem = "cuBLASLt's block-scaled FP8 failed its check against the emulation: " + problem;
  });
  if (problem.empty()) return OkStatus();
  return FailedPreconditionError("--precision fp8 on " + device.ToString() + ": " + problem);
#else
  return FailedPreconditionError("--precision fp8 on " + device.ToString() +
                                 ": this build has no CUDA kernels");
#endif
}

namespace {
void CheckFp8GemmOnCuda(const Tensor& out, const char* op) {
  MOE_CHECK(out.device().is_cuda())
      << op << " runs on CUDA only (the CPU emulates FP8: Fp8QuantDequant)";
}
}  // namespace

void Fp8GemmForward(const Tensor& x, const Tensor& w, const Tensor& y32) {
  CheckFp8GemmOnCuda(y32, "Fp8GemmForward");
#ifdef MOE_WITH_CUDA
  cuda::Fp8GemmForward(x, w, y32);
#endif
}

void Fp8GemmDgrad(const Tensor& dy, const Tensor& w, const Tensor& dx32) {
  CheckFp8GemmOnCuda(dx32, "Fp8GemmDgrad");
#ifdef MOE_WITH_CUDA
  cuda::Fp8GemmDgrad(dy, w, dx32);
#endif
}

void Fp8GemmWgrad(const Tensor& dy, const Tensor& x, const Tensor& dw32, float beta) {
  CheckFp8GemmOnCuda(dw32, "Fp8GemmWgrad");
#ifdef MOE_WITH_CUDA
  cuda::Fp8GemmWgrad(dy, x, dw32, beta);
#endif
}

}  // namespace moe::kernels
