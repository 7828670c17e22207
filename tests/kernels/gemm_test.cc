#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>

#include "kernels/runtime.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using moe::testing::AllClose;
using moe::testing::Poison;
using moe::testing::RandomTensor;
using moe::testing::Values;

// Reference in double: c = alpha * op(a) op(b) + beta * c.
std::vector<double> RefGemm(const Tensor& a, bool ta, const Tensor& b, bool tb,
                            const std::vector<double>& c0, double alpha, double beta) {
  const auto av = Values(a), bv = Values(b);
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1),
                n = tb ? b.dim(0) : b.dim(1);
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? av[static_cast<size_t>(p * a.dim(1) + i)]
                            : av[static_cast<size_t>(i * a.dim(1) + p)];
        const double y = tb ? bv[static_cast<size_t>(j * b.dim(1) + p)]
                            : bv[static_cast<size_t>(p * b.dim(1) + j)];
        s += x * y;
      }
      c[static_cast<size_t>(i * n + j)] =
          alpha * s + (beta != 0 ? beta * c0[static_cast<size_t>(i * n + j)] : 0);
    }
  return c;
}

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesReferenceF32AndF64) {
  const auto p = GetParam();
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor a = RandomTensor(p.ta ? Tensor::Shape{p.k, p.m} : Tensor::Shape{p.m, p.k}, 1, dt);
    Tensor b = RandomTensor(p.tb ? Tensor::Shape{p.n, p.k} : Tensor::Shape{p.k, p.n}, 2, dt);
    Tensor c = RandomTensor({p.m, p.n}, 3, dt);
    const auto c0 = Values(c);
    Gemm(a, p.ta, b, p.tb, c, 0.5, 0.25);
    const double rtol = dt == DType::kF32 ? 1e-4 : 1e-12;
    EXPECT_TRUE(AllClose(c, RefGemm(a, p.ta, b, p.tb, c0, 0.5, 0.25), rtol, rtol)) << DTypeName(dt);
    // beta = 0 must ignore what was there, NaN included.
    Poison(c);
    Gemm(a, p.ta, b, p.tb, c);
    EXPECT_TRUE(AllClose(c, RefGemm(a, p.ta, b, p.tb, c0, 1.0, 0.0), rtol, rtol))
        << DTypeName(dt) << " beta=0";
    // The built-in blocked GEMM too (the path when no BLAS is linked).
    if (dt == DType::kF64) {
      Poison(c);
      cpu::BlockedGemm<double>(p.ta, p.tb, p.m, p.n, p.k, 1.0, a.data<double>(), a.dim(1),
                               b.data<double>(), b.dim(1), 0.0, c.data<double>(), p.n);
      EXPECT_TRUE(AllClose(c, RefGemm(a, p.ta, b, p.tb, c0, 1.0, 0.0), 1e-12, 1e-12)) << "blocked";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AwkwardShapes, GemmTest,
    ::testing::Values(GemmCase{1, 1, 1, false, false}, GemmCase{257, 259, 31, false, false},
                      GemmCase{33, 65, 129, true, false}, GemmCase{17, 300, 7, false, true},
                      GemmCase{64, 3, 257, true, true}, GemmCase{5, 513, 2, false, true}));

TEST(GroupedGemm, ForwardAndBackwardMatchPerGroupGemmsWithEmptyGroups) {
  const int64_t k = 13, n = 11;
  const std::vector<int64_t> offsets = {0, 0, 7, 7, 26, 26};  // groups 0, 2 and 4 are empty
  const int64_t groups = 5, rows = offsets.back();
  Tensor x = RandomTensor({rows, k}, 4), w = RandomTensor({groups, n, k}, 5);
  Tensor y = Tensor::Empty({rows, n}, DType::kF64);
  Poison(y);
  GroupedGemm(x, w, offsets, y);
  Tensor dy = RandomTensor({rows, n}, 6), dx = Tensor::Empty({rows, k}, DType::kF64);
  Poison(dx);
  GroupedGemmBackwardData(dy, w, offsets, dx);
  Tensor dw = RandomTensor({groups, n, k}, 7);
  const auto dw0 = Values(dw);
  GroupedGemmBackwardWeight(dy, x, offsets, dw);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = offsets[static_cast<size_t>(g)], r1 = offsets[static_cast<size_t>(g) + 1];
    const Tensor wg = w.Rows(g, g + 1).Reshape({n, k});
    const Tensor dwg = dw.Rows(g, g + 1).Reshape({n, k});
    std::vector<double> dw0g(dw0.begin() + g * n * k, dw0.begin() + (g + 1) * n * k);
    if (r1 > r0) {
      EXPECT_TRUE(AllClose(y.Rows(r0, r1), RefGemm(x.Rows(r0, r1), false, wg, true, {}, 1, 0),
                           1e-12, 1e-12))
          << g;
      EXPECT_TRUE(AllClose(dx.Rows(r0, r1), RefGemm(dy.Rows(r0, r1), false, wg, false, {}, 1, 0),
                           1e-12, 1e-12))
          << g;
      EXPECT_TRUE(AllClose(dwg, RefGemm(dy.Rows(r0, r1), true, x.Rows(r0, r1), false, dw0g, 1, 1),
                           1e-12, 1e-12))
          << g;
    } else {
      EXPECT_TRUE(AllClose(dwg, dw0g, 0, 0))
          << "an empty group's weight gradient must be untouched: " << g;
    }
  }
}

// The counts where the routing plan leaves them: on the CPU read in place, the same products as
// GroupedGemm over their offsets, bit for bit; counts of the wrong kind, or that do not sum to the
// rows, fail with what is wrong.
TEST(GroupedGemm, DeviceCountsAreTheOffsetsOfTheirPrefixSums) {
  const int64_t k = 13, n = 11, groups = 5, rows = 26;
  const std::vector<int64_t> counts = {0, 7, 0, 19, 0};
  Tensor x = RandomTensor({rows, k}, 8), w = RandomTensor({groups, n, k}, 9);
  Tensor got = Tensor::Empty({rows, n}, DType::kF64), want = Tensor::Empty({rows, n}, DType::kF64);
  Poison(got);
  GroupedGemmDeviceCounts(x, w, Tensor::FromVector<int64_t>(counts, {groups}), got);
  GroupedGemm(x, w, {0, 0, 7, 7, 26, 26}, want);
  EXPECT_TRUE(AllClose(got, want, 0, 0));
  EXPECT_DEATH(GroupedGemmDeviceCounts(x, w, Tensor::FromVector<int64_t>({7, 19}, {2}), got),
               "counts must be i64 \\[5\\]");
  EXPECT_DEATH(
      GroupedGemmDeviceCounts(x, w, Tensor::FromVector<int32_t>({0, 7, 0, 19, 0}, {groups}), got),
      "counts must be i64");
  EXPECT_DEATH(
      GroupedGemmDeviceCounts(x, w, Tensor::FromVector<int64_t>({0, 7, 0, 18, 0}, {groups}), got),
      "offsets must span \\[0, 26\\]");
}

// The reproducible GEMM's contract, one element at a time: from beta c (0 when beta is 0),
// c = fma(alpha a_ik, b_kj, c) for k in order, alpha a_ik rounded to float first.
float Chain(const std::vector<float>& a, int64_t lda, bool ta, const std::vector<float>& b,
            int64_t ldb, bool tb, int64_t i, int64_t j, int64_t k, float alpha, float beta,
            float c0) {
  float c = beta == 0.0f ? 0.0f : beta * c0;
  for (int64_t p = 0; p < k; ++p) {
    const float x = alpha * a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)];
    const float y = b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)];
    c = std::fma(x, y, c);
  }
  return c;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) - 0.5);
  }
  return v;
}

struct Operands {
  GemmCase shape;
  int64_t lda, ldb;
  std::vector<float> a, b, c0;
};

Operands MakeOperands(const GemmCase& p, uint64_t seed) {
  Operands o{p, p.ta ? p.m : p.k, p.tb ? p.k : p.n, {}, {}, {}};
  o.a = RandomFloats(static_cast<size_t>(p.m * p.k), seed);
  o.b = RandomFloats(static_cast<size_t>(p.k * p.n), seed + 1);
  o.c0 = RandomFloats(static_cast<size_t>(p.m * p.n), seed + 2);
  return o;
}

// The first element whose bits differ from the chain, as text; empty when none does.
std::string FirstDifference(const Operands& o, const std::vector<float>& c, float alpha,
                            float beta) {
  const GemmCase& p = o.shape;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const float want = Chain(o.a, o.lda, p.ta, o.b, o.ldb, p.tb, i, j, p.k, alpha, beta,
                               o.c0[static_cast<size_t>(i * p.n + j)]);
      const float got = c[static_cast<size_t>(i * p.n + j)];
      if (std::memcmp(&want, &got, sizeof(float)) != 0)
        return "element (" + std::to_string(i) + ", " + std::to_string(j) + "): got " +
               std::to_string(got) + ", the chain gives " + std::to_string(want);
    }
  return "";
}

// Shapes across the k block (256), row and column edges of every ISA's tiles, both transposes.
const std::vector<GemmCase>& ChainCases() {
  static const std::vector<GemmCase> cases = {
      {1, 1, 1, false, false},    {257, 259, 300, false, false}, {257, 259, 300, true, true},
      {13, 33, 513, true, false}, {100, 70, 5, false, true},     {24, 64, 256, false, false},
      {7, 1, 600, true, true}};
  return cases;
}

// Runs fn(isa) for each ISA this CPU has, saying loudly which it cannot run.
template <typename Fn>
void ForEachIsa(Fn&& fn) {
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    if (!cpu::SetBlockedGemmIsa(isa)) {
      std::cout << "NOTE: this CPU (or build) has no " << isa
                << " tiles: their bitwise check did not run here\n";
      continue;
    }
    fn(std::string(isa));
  }
  cpu::SetBlockedGemmIsa("");
}

TEST(BlockedGemm, EveryElementIsTheFmaChainWhateverIsaAndThreads) {
  const int threads = NumThreads();
  ForEachIsa([&](const std::string& isa) {
    for (int t : {1, 2, 3}) {
      SetNumThreads(t);
      for (const GemmCase& p : ChainCases()) {
        const Operands o = MakeOperands(p, static_cast<uint64_t>(p.m * 7 + p.k));
        for (const float beta : {0.0f, 0.375f}) {
          std::vector<float> c = o.c0;
          if (beta == 0.0f) c.assign(c.size(), std::numeric_limits<float>::quiet_NaN());
          cpu::BlockedGemm<float>(p.ta, p.tb, p.m, p.n, p.k, 0.75f, o.a.data(), o.lda, o.b.data(),
                                  o.ldb, beta, c.data(), p.n);
          EXPECT_EQ(FirstDifference(o, c, 0.75f, beta), "")
              << isa << ", " << t << " threads, " << p.m << " x " << p.n << " x " << p.k
              << (p.ta ? " A^T" : "") << (p.tb ? " B^T" : "") << ", beta " << beta;
        }
      }
    }
  });
  SetNumThreads(threads);
}

// A row's products do not depend on the rows around it: the rows of a 300-row product equal
// those of the same rows computed alone (a token in a batch of one or of hundreds).
TEST(BlockedGemm, ARowIsTheSameBitsAloneAsInABatch) {
  const GemmCase p{300, 97, 333, false, true};
  const Operands o = MakeOperands(p, 11);
  std::vector<float> all(static_cast<size_t>(p.m * p.n)), one(static_cast<size_t>(p.n));
  cpu::BlockedGemm<float>(false, true, p.m, p.n, p.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                          0.0f, all.data(), p.n);
  for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{131}, int64_t{299}}) {
    cpu::BlockedGemm<float>(false, true, 1, p.n, p.k, 1.0f, o.a.data() + i * p.k, o.lda, o.b.data(),
                            o.ldb, 0.0f, one.data(), p.n);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + i * p.n, sizeof(float) * one.size()), 0)
        << "row " << i;
  }
}

// The accumulating form adds each element of the chain's product (beta 0, alpha 1), rounded to
// float, to the f64 accumulator: what a float product and an f64 add would give, bit for bit.
TEST(BlockedGemmAccumulate, AddsTheFloatProductToTheF64Accumulator) {
  const int threads = NumThreads();
  ForEachIsa([&](const std::string& isa) {
    for (int t : {1, 2}) {
      SetNumThreads(t);
      for (const GemmCase& p : ChainCases()) {
        const Operands o = MakeOperands(p, static_cast<uint64_t>(p.n * 3 + p.k));
        std::vector<double> acc(static_cast<size_t>(p.m * p.n));
        for (size_t i = 0; i < acc.size(); ++i) acc[i] = static_cast<double>(o.c0[i]) * 1e-3;
        const std::vector<double> acc0 = acc;
        cpu::BlockedGemmAccumulate<float>(p.ta, p.tb, p.m, p.n, p.k, o.a.data(), o.lda, o.b.data(),
                                          o.ldb, acc.data(), p.n);
        int64_t bad = -1;
        double want = 0;
        for (int64_t e = 0; e < p.m * p.n && bad < 0; ++e) {
          want = acc0[static_cast<size_t>(e)] +
                 static_cast<double>(Chain(o.a, o.lda, p.ta, o.b, o.ldb, p.tb, e / p.n, e % p.n,
                                           p.k, 1.0f, 0.0f, 0.0f));
          if (std::memcmp(&want, &acc[static_cast<size_t>(e)], sizeof(double)) != 0) bad = e;
        }
        EXPECT_EQ(bad, -1) << isa << ", " << t << " threads, " << p.m << " x " << p.n << " x "
                           << p.k << ": got " << (bad < 0 ? 0 : acc[static_cast<size_t>(bad)])
                           << ", want " << want;
      }
    }
  });
  SetNumThreads(threads);
}

}  // namespace
}  // namespace moe::kernels
