#include "kernels/gemm.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moe::kernels
