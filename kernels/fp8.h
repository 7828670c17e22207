// FP8 numerics as DeepSeek-V3 trains with them (../shared/reference): e4m3 values (OCP "E4M3FN": no
// infinities, largest finite 448, NaN 0x7F/0xFF), round to nearest even, saturating; activations scaled
// per 1x128 tile along the reduction dimension, weights per 128x128 block, each scale amax / 448 in
// fp32; and the Blackwell MXFP8 variant: 1x32 blocks with power-of-two (E8M0) scales.
//
// The CPU reference of the FP8 path: the CUDA kernels and cuBLASLt's block-scaled GEMM are checked
// against these, and the emulated FP8 GEMM is these scales and roundings followed by an fp32 GEMM of
// the dequantised values. (Not wired into training yet: see docs/benchmarks.md, GPU.)
#pragma once

#include <cstdint>
#include <vector>

namespace moe::kernels::fp8 {

inline constexpr float kE4M3Max = 448.0f;

uint8_t FloatToE4M3(float x);  // round to nearest even, saturating to +-448; NaN -> 0x7F (sign kept)
float E4M3ToFloat(uint8_t v);

// A [rows, cols] row-major matrix quantised in tiles of `tile_rows` x `tile_cols` (1 x 128 for
// activations, 128 x 128 for weights, 1 x 32 for MXFP8): one fp32 scale per tile, row-major over
// tiles (ceil(rows / tile_rows) x ceil(cols / tile_cols)); partial edge tiles are allowed.
struct Quantized {
  int64_t rows = 0, cols = 0, tile_rows = 1, tile_cols = 128;
  std::vector<uint8_t> values;  // e4m3
  std::vector<float> scales;    // value = e4m3 * scale
};

// scale = amax / 448 (an all-zero tile gets scale 1); power_of_two: the smallest power of two
// >= amax / 448 (MXFP8's E8M0 scales), so no value saturates.
Quantized Quantize(const float* x, int64_t rows, int64_t cols, int64_t tile_rows, int64_t tile_cols,
                   bool power_of_two = false);
std::vector<float> Dequantize(const Quantized& q);

}  // namespace moe::kernels::fp8
