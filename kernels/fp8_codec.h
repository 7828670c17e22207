// The e4m3 codec and tile scales of FP8 training (kernels/fp8.h says how DeepSeek-V3 uses them):
// the CPU reference both backends and the family build on, below them all.
#pragma once

#include <cstdint>
#include <vector>

namespace moe::kernels::fp8 {

inline constexpr float kE4M3Max = 448.0f;

uint8_t FloatToE4M3(
    float x);  // round to nearest even, saturating to +-448; NaN -> 0x7F (sign kept)
float E4M3ToFloat(uint8_t v);
// E4M3ToFloat(FloatToE4M3(x)) without the encoding: bit arithmetic on the float (round to nearest
// even at 3 mantissa bits, multiples of 2^-9 below 2^-6, saturating at 448). Tested equal over a
// sweep of every binade; the CPU path of Fp8QuantDequant uses it.
float RoundToE4M3(float x);

// A [rows, cols] row-major matrix quantised in tiles of `tile_rows` x `tile_cols` (1 x 128 for
// activations, 128 x 128 for weights, 1 x 32 for MXFP8): one fp32 scale per tile, row-major over
// tiles (ceil(rows / tile_rows) x ceil(cols / tile_cols)); partial edge tiles are allowed.
struct Quantized {
  int64_t rows = 0, cols = 0, tile_rows = 1, tile_cols = 128;
  std::vector<uint8_t> values;  // e4m3
  std::vector<float> scales;    // value = e4m3 * scale
};

// A tile's scale: amax / 448 (an all-zero tile gets 1); power_of_two: the smallest power of two
// >= amax / 448 (MXFP8's E8M0 scales), so no value saturates.
float TileScale(float amax, bool power_of_two = false);

// Quantises x in tiles with TileScale's scales (value = e4m3(x / scale)).
Quantized Quantize(const float* x, int64_t rows, int64_t cols, int64_t tile_rows, int64_t tile_cols,
                   bool power_of_two = false);
std::vector<float> Dequantize(const Quantized& q);

}  // namespace moe::kernels::fp8
