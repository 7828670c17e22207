#include "kernels/fp8_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace moe::kernels::fp8 {

uint8_t FloatToE4M3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7E;  // saturate (infinities included)
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the unbiased exponent of a is e - 1
  const int exp = e - 1;
  if (a == 0.0f ||
      exp < -6) {  // subnormal: multiples of 2^-9; rounding up to 8 gives the first normal
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int mant = static_cast<int>(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f));  // ties to even
  int biased = exp + 7;
  if (mant == 8) mant = 0, ++biased;
  const int code = std::min((biased << 3) | mant, 0x7E);  // 0x7F is NaN: round into 448
  return sign | static_cast<uint8_t>(code);
}

float E4M3ToFloat(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int biased = (v >> 3) & 0xF, mant = v & 0x7;
  if (biased == 0xF && mant == 0x7) return std::nanf("");
  if (biased == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, biased - 7);
}

float RoundToE4M3(float x) {
  if (x != x) return x;
  const float a = std::fabs(x);
  float r;
  if (a >= 0.015625f) {  // normal: keep 3 of the 23 mantissa bits, ties to even (a carry bumps the
                         // exponent)
    uint32_t b;
    std::memcpy(&b, &a, sizeof b);
    b += 0x7FFFFu + ((b >> 20) & 1u);
    b &= 0xFFF00000u;
    std::memcpy(&r, &b, sizeof r);
    r = std::min(r, kE4M3Max);  // 464 and above (infinity too) round past 448: saturate
  } else {  // subnormal: multiples of 2^-9; adding 2^14 (whose ulp is 2^-9) rounds to nearest even
    r = (a + 16384.0f) - 16384.0f;
  }
  return std::copysign(r, x);
}

float TileScale(float amax, bool power_of_two) {
  if (!(amax > 0)) return 1.0f;
  const float s = amax / kE4M3Max;
  if (!power_of_two) return s;
  int e = 0;  // s = m * 2^e, m in [0.5, 1): exact, where log2 is not
  const float m = std::frexp(s, &e);
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

Quantized Quantize(const float* x, int64_t rows, int64_t cols, int64_t tile_rows, int64_t tile_cols,
                   bool power_of_two) {
  MOE_CHECK(rows >= 0 && cols >= 0 && tile_rows > 0 && tile_cols > 0) << "fp8::Quantize: bad shape";
  Quantized q{
      rows, cols, tile_rows, tile_cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols)), {}};
  const int64_t tr = (rows + tile_rows - 1) / tile_rows, tc = (cols + tile_cols - 1) / tile_cols;
  q.scales.resize(static_cast<size_t>(tr * tc));
  for (int64_t bi = 0; bi < tr; ++bi) {
    for (int64_t bj = 0; bj < tc; ++bj) {
      const int64_t r0 = bi * tile_rows, r1 = std::min(rows, r0 + tile_rows);
      const int64_t c0 = bj * tile_cols, c1 = std::min(cols, c0 + tile_cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      }
      const float scale = TileScale(amax, power_of_two);
      q.scales[static_cast<size_t>(bi * tc + bj)] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c)
          q.values[static_cast<size_t>(r * cols + c)] = FloatToE4M3(x[r * cols + c] / scale);
      }
    }
  }
  return q;
}

std::vector<float> Dequantize(const Quantized& q) {
  std::vector<float> out(q.values.size());
  const int64_t tc = (q.cols + q.tile_cols - 1) / q.tile_cols;
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const float scale = q.scales[static_cast<size_t>((r / q.tile_rows) * tc + c / q.tile_cols)];
      out[static_cast<size_t>(r * q.cols + c)] =
          E4M3ToFloat(q.values[static_cast<size_t>(r * q.cols + c)]) * scale;
    }
  }
  return out;
}

}  // namespace moe::kernels::fp8
