// The CUDA path of Fp8QuantDequant (kernels/fp8.h): one block of 128 threads per tile computes the
// tile's amax, its scale as the CPU does (amax / 448 in fp32, or the power of two above it), and
// each value's e4m3 with the hardware's conversion (round to nearest even, saturating), dequantised
// to f32. The CPU path (kernels/cpu/fp8.cc) is the reference: tests/gpu checks them bitwise.
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_kernels.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
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
