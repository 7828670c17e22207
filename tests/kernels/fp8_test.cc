// FP8 (e4m3) quantisation against hand-computed cases: the encoding, rounding to nearest even,
// saturation, subnormals, NaN; the 1x128 activation tiles, 128x128 weight blocks and MXFP8's 1x32
// power-of-two scales; the Tensor-level quantise-dequantise the FP8 training path runs (row groups,
// per-expert weight blocks, bf16 inputs) against them.
#include "kernels/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/elementwise.h"

namespace moe::kernels::fp8 {
namespace {

TEST(Fp8, E4M3EncodesByHand) {
  EXPECT_EQ(FloatToE4M3(1.0f), 0x38);  // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(FloatToE4M3(0.5f), 0x30);
  EXPECT_EQ(FloatToE4M3(-2.0f), 0xC0);
  EXPECT_EQ(FloatToE4M3(1.125f), 0x39);        // mantissa 1/8
  EXPECT_EQ(FloatToE4M3(448.0f), 0x7E);        // the largest finite: 1.75 x 2^8
  EXPECT_EQ(FloatToE4M3(0.015625f), 0x08);     // 2^-6, the smallest normal
  EXPECT_EQ(FloatToE4M3(0.001953125f), 0x01);  // 2^-9, the smallest subnormal
  EXPECT_EQ(FloatToE4M3(0.013671875f), 0x07);  // 7 x 2^-9, the largest subnormal
  EXPECT_EQ(FloatToE4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToE4M3(-0.0f), 0x80);
}

TEST(Fp8, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(FloatToE4M3(1.0625f), 0x38) << "halfway between 1 and 1.125: to the even mantissa (0)";
  EXPECT_EQ(FloatToE4M3(1.1875f), 0x3A)
      << "halfway between 1.125 and 1.25: to the even mantissa (2)";
  EXPECT_EQ(FloatToE4M3(1.07f), 0x39) << "above halfway: up";
  EXPECT_EQ(FloatToE4M3(0.0009765625f), 0x00) << "half the smallest subnormal: to even (0)";
  EXPECT_EQ(FloatToE4M3(0.0029296875f), 0x02) << "1.5 x 2^-9: to even (2)";
  EXPECT_EQ(FloatToE4M3(0.0146484375f), 0x08) << "7.5 x 2^-9 rounds up into the smallest normal";
  EXPECT_EQ(FloatToE4M3(15.5f), 0x58)
      << "1.9375 x 2^3 (mantissa 7.5 eighths) rounds up to 2^4: exponent 11";
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
  x[5] = -896.0f;     // row 0, tile 0: amax 896 -> scale 2
  x[6] = 3.0f;        // 3 / 2 = 1.5, exact in e4m3
  x[130] = 1.0f;      // row 0, tile 1: amax 1 -> scale 1/448
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

TEST(Fp8, RoundToE4M3IsDecodeOfEncodeEverywhere) {
  // Every 97th float bit pattern (both signs, every binade, subnormals, infinities, NaNs), and the
  // halfway points and neighbours of every e4m3 value.
  auto check = [](float x) {
    const float want = E4M3ToFloat(FloatToE4M3(x)), got = RoundToE4M3(x);
    if (std::isnan(want)) return std::isnan(got);
    return std::memcmp(&want, &got, sizeof want) == 0 ||
           (want == 0 && got == 0 && std::signbit(want) == std::signbit(got));
  };
  int64_t bad = 0;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 97) {
    float x;
    const uint32_t u = static_cast<uint32_t>(b);
    std::memcpy(&x, &u, sizeof x);
    if (!check(x) && ++bad <= 5) ADD_FAILURE() << "x = " << x << " (bits " << std::hex << u << ")";
  }
  for (int c = 0; c < 0x7F; ++c) {
    const float v = E4M3ToFloat(static_cast<uint8_t>(c)),
                next = E4M3ToFloat(static_cast<uint8_t>(c + 1));
    for (float x : {v, (v + next) / 2, std::nextafter((v + next) / 2, 0.0f),
                    std::nextafter((v + next) / 2, 1e9f)}) {
      if (!check(x) && ++bad <= 10) ADD_FAILURE() << "x = " << x;
      if (!check(-x) && ++bad <= 10) ADD_FAILURE() << "x = " << -x;
    }
  }
  EXPECT_EQ(bad, 0);
}

std::vector<float> Spread(int64_t n, uint32_t seed) {  // values over many binades, both signs
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    const float mant = static_cast<float>(s >> 8) / 16777216.0f;
    x = (s & 1 ? -1.0f : 1.0f) * std::ldexp(0.5f + mant, static_cast<int>(s % 23) - 14);
  }
  return v;
}

// Rows [r0, r1) of x quantised on their own through the reference, into `out`.
void Reference(const std::vector<float>& x, int64_t r0, int64_t r1, int64_t cols, int64_t tr,
               int64_t tc, std::vector<float>* out) {
  const std::vector<float> back = Dequantize(Quantize(x.data() + r0 * cols, r1 - r0, cols, tr, tc));
  std::copy(back.begin(), back.end(), out->begin() + r0 * cols);
}

TEST(Fp8QuantDequant, MatchesTheReferenceTileForTile) {
  const int64_t rows = 203, cols = 300;
  const std::vector<float> x = Spread(rows * cols, 1);
  const Tensor xt = Tensor::FromVector(x, {rows, cols});
  for (auto [tr, tc] : {std::pair<int64_t, int64_t>{1, 128}, {128, 128}, {128, 1}}) {
    Tensor out = Tensor::Empty({rows, cols}, DType::kF32);
    Fp8QuantDequant(xt, tr, tc, out);
    std::vector<float> want(x.size());
    Reference(x, 0, rows, cols, tr, tc, &want);
    EXPECT_EQ(out.ToVector<float>(), want) << tr << " x " << tc;
    EXPECT_NE(out.ToVector<float>(), x) << "the values are rounded";
  }
}

TEST(Fp8QuantDequant, RowGroupsRestartTheTilesAndExpertWeightsAreTiledEachOnTheirOwn) {
  const int64_t rows = 300, cols = 40;
  std::vector<float> x = Spread(rows * cols, 2);
  for (int64_t c = 0; c < cols; ++c)
    x[static_cast<size_t>(10 * cols + c)] = 1000.0f;            // row 10: a huge one in group 0
  const std::vector<int64_t> groups = {0, 100, 100, 250, 300};  // an empty group too
  Tensor out = Tensor::Empty({rows, cols}, DType::kF32);
  Fp8QuantDequant(Tensor::FromVector(x, {rows, cols}), 128, 1, out, groups);
  std::vector<float> want(x.size());
  Reference(x, 0, 100, cols, 128, 1, &want);
  Reference(x, 100, 250, cols, 128, 1, &want);
  Reference(x, 250, 300, cols, 128, 1, &want);
  EXPECT_EQ(out.ToVector<float>(), want);
  // Without the groups, rows 100..127 would share row 10's tile and its scale (1000 / 448): small
  // values there would flush to zero.
  Tensor ungrouped = Tensor::Empty({rows, cols}, DType::kF32);
  Fp8QuantDequant(Tensor::FromVector(x, {rows, cols}), 128, 1, ungrouped);
  EXPECT_NE(ungrouped.ToVector<float>(), want);
  // [G, N, K] weights: each expert's matrix in its own 128 x 128 blocks (N = 70: no block spans
  // two).
  const std::vector<float> w = Spread(3 * 70 * 50, 3);
  Tensor wq = Tensor::Empty({3, 70, 50}, DType::kF32);
  Fp8QuantDequant(Tensor::FromVector(w, {3, 70, 50}), 128, 128, wq);
  std::vector<float> wwant(w.size());
  for (int64_t g = 0; g < 3; ++g) Reference(w, g * 70, (g + 1) * 70, 50, 128, 128, &wwant);
  EXPECT_EQ(wq.ToVector<float>(), wwant);
}

TEST(Fp8QuantDequant, Bf16InputsAndBadArgumentsNameTheProblem) {
  const std::vector<float> x = Spread(4 * 256, 4);
  Tensor b = Tensor::Empty({4, 256}, DType::kBF16);
  Convert(Tensor::FromVector(x, {4, 256}), b);
  Tensor f = Tensor::Empty({4, 256}, DType::kF32);
  Convert(b, f);  // the bf16 values, exactly, as f32
  Tensor from_bf16 = Tensor::Empty({4, 256}, DType::kF32),
         from_f32 = Tensor::Empty({4, 256}, DType::kF32);
  Fp8QuantDequant(b, 1, 128, from_bf16);
  Fp8QuantDequant(f, 1, 128, from_f32);
  EXPECT_EQ(from_bf16.ToVector<float>(), from_f32.ToVector<float>());
  EXPECT_DEATH(Fp8QuantDequant(f, 1, 128, Tensor::Empty({4, 256}, DType::kBF16)), "must be f32");
  EXPECT_DEATH(Fp8QuantDequant(f, 1, 128, from_f32, {0, 3}), "row_groups must run from 0 to 4");
}

}  // namespace
}  // namespace moe::kernels::fp8
