// The CPU path of Fp8QuantDequant (kernels/fp8.h): the reference numerics of fp8::Quantize and
// fp8::Dequantize (through fp8::RoundToE4M3, their composition), one band of tile_rows rows (within
// a row group) per work item.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/fp8_codec.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

// Rows [r0, r1) of x (f32, `cols` wide) into out, one scale per tile of those rows and tile_cols
// columns.
void QuantDequantBand(const float* x, float* out, int64_t r0, int64_t r1, int64_t cols,
                      int64_t tile_cols, bool pow2) {
  for (int64_t c0 = 0; c0 < cols; c0 += tile_cols) {
    const int64_t c1 = std::min(cols, c0 + tile_cols);
    float amax = 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    }
    const float scale = fp8::TileScale(amax, pow2);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) {
        out[r * cols + c] = fp8::RoundToE4M3(x[r * cols + c] / scale) * scale;
      }
    }
  }
}

}  // namespace

void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& groups, bool mxfp8) {
  const int64_t cols = x.dim(1);
  Tensor xf = x;
  if (x.dtype() != DType::kF32) {
    xf = Tensor::Empty(x.shape(), DType::kF32, x.device());
    float* f = xf.data<float>();
    ParallelFor(x.numel(), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) f[i] = LoadAs<float>(x, i);
    });
  }
  std::vector<std::pair<int64_t, int64_t>>
      bands;  // [r0, r1): tile_rows rows at most, within one group
  for (size_t g = 0; g + 1 < groups.size(); ++g) {
    for (int64_t r = groups[g]; r < groups[g + 1]; r += tile_rows)
      bands.emplace_back(r, std::min(groups[g + 1], r + tile_rows));
  }
  const float* src = xf.data<float>();
  float* dst = out.data<float>();
  const int64_t per_band = std::max<int64_t>(1, tile_rows * cols * 8);
  ParallelFor(static_cast<int64_t>(bands.size()), per_band, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      QuantDequantBand(src, dst, bands[static_cast<size_t>(i)].first,
                       bands[static_cast<size_t>(i)].second, cols, tile_cols, mxfp8);
    }
  });
}

}  // namespace moe::kernels::cpu
