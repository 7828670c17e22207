// FP8 (e4m3) quantisation against hand-computed cases: the encoding, rounding to nearest even,
// saturation, subnormals, NaN; the 1x128 activation tiles, 128x128 weight blocks and MXFP8's 1x32
// power-of-two scales.
#include "kernels/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace moe::kernels::fp8 {
namespace {

TEST(Fp8, E4M3EncodesByHand) {
  EXPECT_EQ(FloatToE4M3(1.0f), 0x38);       // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(FloatToE4M3(0.5f), 0x30);
  EXPECT_EQ(FloatToE4M3(-2.0f), 0xC0);
  EXPECT_EQ(FloatToE4M3(1.125f), 0x39);     // mantissa 1/8
  EXPECT_EQ(FloatToE4M3(448.0f), 0x7E);     // the largest finite: 1.75 x 2^8
  EXPECT_EQ(FloatToE4M3(0.015625f), 0x08);  // 2^-6, the smallest normal
  EXPECT_EQ(FloatToE4M3(0.001953125f), 0x01);  // 2^-9, the smallest subnormal
  EXPECT_EQ(FloatToE4M3(0.013671875f), 0x07);  // 7 x 2^-9, the largest subnormal
  EXPECT_EQ(FloatToE4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToE4M3(-0.0f), 0x80);
}

TEST(Fp8, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(FloatToE4M3(1.0625f), 0x38) << "halfway between 1 and 1.125: to the even mantissa (0)";
  EXPECT_EQ(FloatToE4M3(1.1875f), 0x3A) << "halfway between 1.125 and 1.25: to the even mantissa (2)";
  EXPECT_EQ(FloatToE4M3(1.07f), 0x39) << "above halfway: up";
  EXPECT_EQ(FloatToE4M3(0.0009765625f), 0x00) << "half the smallest subnormal: to even (0)";
  EXPECT_EQ(FloatToE4M3(0.0029296875f), 0x02) << "1.5 x 2^-9: to even (2)";
  EXPECT_EQ(FloatToE4M3(0.0146484375f), 0x08) << "7.5 x 2^-9 rounds up into the smallest normal";
  EXPECT_EQ(FloatToE4M3(15.5f), 0x58) << "1.9375 x 2^3 (mantissa 7.5 eighths) rounds up to 2^4: exponent 11";
  EXPECT_EQ(FloatToE4M3(1000.0f), 0x7E) << "saturates, no infinity in e4m3";
  EXPECT_EQ(FloatToE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToE4M3(460.0f), 0x7E) << "would round to 480, which does not exist: 448";
  EXPECT_EQ(FloatToE4M3(NAN) & 0x7F, 0x7F);
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (int v = 0; v < 256; ++v) {
    const float f = E4M3ToFloat(static_cast<uint8_t>(v));
    if ((v & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << v;
      continue;
    }
    EXPECT_EQ(FloatToE4M3(f), v) << v << " = " << f;
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0x01), 0.001953125f);
}

TEST(Fp8, ActivationTilesAre1x128WithScaleAmaxOver448) {
  std::vector<float> x(2 * 256, 0.0f);
  x[5] = -896.0f;   // row 0, tile 0: amax 896 -> scale 2
  x[6] = 3.0f;      // 3 / 2 = 1.5, exact in e4m3
  x[130] = 1.0f;    // row 0, tile 1: amax 1 -> scale 1/448
  x[256 + 7] = 0.1f;  // row 1, tile 0
  const Quantized q = Quantize(x.data(), 2, 256, 1, 128);
  ASSERT_EQ(q.scales.size(), 4u);
  EXPECT_EQ(q.scales[0], 2.0f);
  EXPECT_FLOAT_EQ(q.scales[1], 1.0f / 448.0f);
  EXPECT_FLOAT_EQ(q.scales[2], 0.1f / 448.0f);
  EXPECT_EQ(q.scales[3], 1.0f) << "an all-zero tile";
  EXPECT_EQ(q.values[5], 0xFE) << "-448 x 2";
  EXPECT_EQ(q.values[6], 0x3C) << "1.5";
  EXPECT_EQ(q.values[130], 0x7E) << "the tile's amax maps to 448";
  const std::vector<float> back = Dequantize(q);
  EXPECT_EQ(back[5], -896.0f);
  EXPECT_EQ(back[6], 3.0f);
  EXPECT_FLOAT_EQ(back[130], 1.0f);
  EXPECT_FLOAT_EQ(back[256 + 7], 0.1f);
}

TEST(Fp8, WeightBlocksAre128x128AndMxfp8ScalesArePowersOfTwo) {
  std::vector<float> w(256 * 130, 0.5f);
  w[200 * 130 + 129] = 7.0f;  // block (1, 1): a partial edge block of 2 columns
  const Quantized q = Quantize(w.data(), 256, 130, 128, 128);
  ASSERT_EQ(q.scales.size(), 4u);  // 2 x 2 blocks
  EXPECT_FLOAT_EQ(q.scales[0], 0.5f / 448.0f);
  EXPECT_FLOAT_EQ(q.scales[3], 7.0f / 448.0f);
  EXPECT_FLOAT_EQ(Dequantize(q)[200 * 130 + 129], 7.0f);
  // MXFP8: 1 x 32, scale 2^ceil(log2(amax / 448)): amax 7 -> 2^-6 (7 / 448 = 0.015625 exactly).
  std::vector<float> a(64, 0.0f);
  a[0] = 7.0f;
  a[40] = 500.0f;  // 500 / 448 -> 2^1
  const Quantized m = Quantize(a.data(), 1, 64, 1, 32, /*power_of_two=*/true);
  EXPECT_EQ(m.scales[0], 0.015625f);
  EXPECT_EQ(m.scales[1], 2.0f);
  EXPECT_EQ(m.values[40], FloatToE4M3(250.0f)) << "no saturation with a power-of-two scale";
}

}  // namespace
}  // namespace moe::kernels::fp8
