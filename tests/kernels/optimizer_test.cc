#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(AdamW, MatchesTheScalarUpdateOverSeveralSteps) {
  const int64_t n = 1031;
  Tensor p = RandomTensor({n}, 1), m = Tensor::Zeros({n}, DType::kF64),
         v = Tensor::Zeros({n}, DType::kF64);
  std::vector<double> rp = Values(p), rm(n, 0), rv(n, 0);
  AdamWConfig cfg{.lr = 0.01,
                  .beta1 = 0.9,
                  .beta2 = 0.95,
                  .eps = 1e-8,
                  .weight_decay = 0.1,
                  .step = 1,
                  .grad_scale = 0.5};
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor g = RandomTensor({n}, 10 + static_cast<uint64_t>(step));
    const auto gv = Values(g);
    cfg.step = step;
    AdamW(p, g, m, v, cfg);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = gv[static_cast<size_t>(i)] * cfg.grad_scale;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      const double mh = rm[i] / (1 - std::pow(0.9, step)), vh = rv[i] / (1 - std::pow(0.95, step));
      rp[static_cast<size_t>(i)] -=
          0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * rp[static_cast<size_t>(i)]);
    }
  }
  EXPECT_TRUE(AllClose(p, rp, 1e-10, 1e-12));
}

TEST(Elementwise, SumSquaresIsIndependentOfTheThreadCountAndExact) {
  Tensor t = RandomTensor({100003}, 3, DType::kF32);
  double ref = 0;
  for (double x : Values(t)) ref += x * x;
  EXPECT_NEAR(SumSquares(t), ref, 1e-9 * ref);
}

TEST(Elementwise, GatherRowsAxpyAddScale) {
  Tensor src = RandomTensor({5, 3}, 1), idx = Tensor::FromVector<int32_t>({4, 0, 4}, {3});
  Tensor dst = Tensor::Empty({3, 3}, DType::kF64);
  Poison(dst);
  GatherRows(src, idx, dst);
  EXPECT_TRUE(AllClose(dst.Rows(0, 1), src.Rows(4, 5), 0, 0));
  EXPECT_TRUE(AllClose(dst.Rows(1, 2), src.Rows(0, 1), 0, 0));
  Tensor a = RandomTensor({4}, 2), b = RandomTensor({4}, 3), out = Tensor::Empty({4}, DType::kF64);
  Add(out, a, b);
  Axpy(out, -1.0, b);
  EXPECT_TRUE(AllClose(out, a, 1e-15, 1e-15));
  Scale(out, 2.0);
  Fill(a, 0.5);
  EXPECT_NEAR(Values(a)[3], 0.5, 0);
}

}  // namespace
}  // namespace moe::kernels
