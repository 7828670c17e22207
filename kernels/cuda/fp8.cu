// The CUDA path of Fp8QuantDequant (kernels/fp8.h): one block of 128 threads per tile computes the
// tile's amax, its scale as the CPU does (amax / 448 in fp32, or the power of two above it), and
// each value's e4m3 with the hardware's conversion (round to nearest even, saturating), dequantised
// to f32. The CPU path (kernels/cpu/fp8.cc) is the reference: tests/gpu checks them bitwise.
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kTileThreads = 128;

__device__ inline float E4M3RoundTrip(float v) {
  const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  const __half_raw h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
  return __half2float(__half(h));
}

// Rows [r0, r1) of x, tiled from r0: block (bx, by) is the tile at rows r0 + bx * tile_rows and
// columns by * tile_cols.
template <typename T>
__global__ void QuantDequantKernel(const T* x, float* out, int64_t r0, int64_t r1, int64_t cols,
                                   int64_t tile_rows, int64_t tile_cols, bool pow2,
                                   int64_t first_col_tile) {
  const int64_t tr0 = r0 + blockIdx.x * tile_rows, tr1 = min(r1, tr0 + tile_rows);
  const int64_t c0 = (first_col_tile + blockIdx.y) * tile_cols, c1 = min(cols, c0 + tile_cols);
  const int64_t w = c1 - c0, n = (tr1 - tr0) * w;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    amax = fmaxf(amax, fabsf(Ld(x[(tr0 + i / w) * cols + c0 + i % w])));
  amax = BlockMax(amax);
  float scale = 1.f;
  if (amax > 0.f) {
    scale = amax / 448.f;
    if (pow2) {  // the smallest power of two >= scale, exactly (as kernels/fp8.cc TileScale)
      int e = 0;
      const float m = frexpf(scale, &e);
      scale = ldexpf(1.f, m == 0.5f ? e - 1 : e);
    }
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t at = (tr0 + i / w) * cols + c0 + i % w;
    out[at] = E4M3RoundTrip(Ld(x[at]) / scale) * scale;
  }
}

}  // namespace

void Fp8QuantDequant(const Tensor& x, int64_t tile_rows, int64_t tile_cols, const Tensor& out,
                     const std::vector<int64_t>& groups, bool mxfp8) {
  CheckOnCuda({&x, &out}, "Fp8QuantDequant");
  CheckF32(out, "Fp8QuantDequant", "out");
  const int64_t cols = x.dim(1), col_tiles = (cols + tile_cols - 1) / tile_cols;
  MOE_CUDA_TYPED(StorageType({&x}, "Fp8QuantDequant"), T, {
    for (size_t g = 0; g + 1 < groups.size(); ++g) {
      const int64_t r0 = groups[g], r1 = groups[g + 1],
                    row_tiles = (r1 - r0 + tile_rows - 1) / tile_rows;
      // Column tiles on grid.y, at most 65,535 a launch (128 x 1 tiles make one per column).
      for (int64_t c = 0; row_tiles > 0 && c < col_tiles; c += 65535) {
        const dim3 grid(static_cast<unsigned>(row_tiles),
                        static_cast<unsigned>(std::min<int64_t>(65535, col_tiles - c)));
        QuantDequantKernel<T><<<grid, kTileThreads, 0, Stream()>>>(
            Ptr<T>(x), Ptr<float>(out), r0, r1, cols, tile_rows, tile_cols, mxfp8, c);
      }
    }
  });
  CheckLaunch("Fp8QuantDequant");
}

}  // namespace moe::kernels::cuda
