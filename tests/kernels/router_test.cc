#include "kernels/router.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

Tensor Logits(std::vector<double> v, int64_t experts) {
  return Tensor::FromVector<double>(v, {static_cast<int64_t>(v.size()) / experts, experts});
}

struct Routed {
  Tensor scores, idx, w;
};

Routed Route(const Tensor& logits, const Tensor& bias, const RouterConfig& cfg) {
  const int64_t t = logits.dim(0), e = logits.dim(1);
  Routed r{Tensor::Empty({t, e}, DType::kF64), Tensor::Empty({t, cfg.top_k}, DType::kI32),
           Tensor::Empty({t, cfg.top_k}, DType::kF64)};
  Poison(r.scores);
  Poison(r.idx);
  Poison(r.w);
  RouterForward(logits, bias, cfg, r.scores, r.idx, r.w);
  return r;
}

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(Router, BiasSteersSelectionButNotWeights) {
  RouterConfig cfg{.top_k = 2, .num_groups = 1, .topk_groups = 1, .sigmoid = true, .route_scale = 2.5, .use_bias = true};
  Tensor logits = Logits({3.0, 2.0, 1.0, 0.0}, 4);
  Tensor bias = Tensor::FromVector<double>({0.0, 0.0, 0.0, 10.0}, {4});
  Routed r = Route(logits, bias, cfg);
  // Expert 3 wins on score + bias, then expert 0.
  EXPECT_EQ(r.idx.data<int32_t>()[0], 3);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 0);
  // Weights from the unbiased scores, normalised over the chosen two, times route_scale.
  const double s3 = Sigmoid(0.0), s0 = Sigmoid(3.0);
  EXPECT_NEAR(r.w.data<double>()[0], 2.5 * s3 / (s3 + s0), 1e-12);
  EXPECT_NEAR(r.w.data<double>()[1], 2.5 * s0 / (s3 + s0), 1e-12);
}

TEST(Router, GroupLimitedRoutingKeepsTheBestGroups) {
  // 6 experts in 3 groups of 2; keep 1 group. Group scores (sum of top two with bias in use):
  // g0 = s(2)+s(-5), g1 = s(1.5)+s(1.4), g2 = s(-1)+s(-1). Group 1 wins although expert 0 is the best.
  RouterConfig cfg{.top_k = 2, .num_groups = 3, .topk_groups = 1, .sigmoid = true, .route_scale = 1.0, .use_bias = true};
  Tensor logits = Logits({2.0, -5.0, 1.5, 1.4, -1.0, -1.0}, 6);
  Tensor bias = Tensor::Zeros({6}, DType::kF64);
  Routed r = Route(logits, bias, cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 2);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 3);
  // Without the bias in use a group scores by its maximum: group 0 (expert 0) wins, and only its two
  // experts are eligible.
  cfg.use_bias = false;
  r = Route(logits, bias, cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 0);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 1);
  // Off (one group): the global top two.
  cfg.num_groups = 1;
  r = Route(logits, bias, cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 0);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 2);
}

TEST(Router, TiesGoToTheLowerIndexAndSoftmaxWeightsAreNotRenormalised) {
  RouterConfig cfg{.top_k = 2, .num_groups = 1, .topk_groups = 1, .sigmoid = false, .route_scale = 1.0, .use_bias = false};
  Tensor logits = Logits({1.0, 1.0, 1.0, 1.0}, 4);
  Routed r = Route(logits, Tensor::Zeros({4}, DType::kF64), cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 0);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 1);
  EXPECT_NEAR(r.w.data<double>()[0], 0.25, 1e-12);
  EXPECT_NEAR(r.w.data<double>()[1], 0.25, 1e-12);
}

TEST(Router, TopKEqualsNumExpertsAndTopOne) {
  for (int64_t k : {1, 5}) {
    RouterConfig cfg{.top_k = k, .num_groups = 1, .topk_groups = 1, .sigmoid = true, .route_scale = 1.0, .use_bias = true};
    Tensor logits = RandomTensor({9, 5}, 3, DType::kF64, -3, 3);
    Routed r = Route(logits, RandomTensor({5}, 4), cfg);
    for (int64_t t = 0; t < 9; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += r.w.data<double>()[t * k + j];
      EXPECT_NEAR(sum, 1.0, 1e-12);  // normalised sigmoid weights sum to route_scale
      if (k == 5) {
        std::vector<bool> seen(5, false);
        for (int64_t j = 0; j < k; ++j) seen[static_cast<size_t>(r.idx.data<int32_t>()[t * k + j])] = true;
        for (bool s : seen) EXPECT_TRUE(s);
      }
    }
  }
}

// d/dlogits of sum(w * G) + sum(scores * H), with the selection held fixed.
void CheckBackward(RouterConfig cfg, uint64_t seed) {
  const int64_t t = 7, e = 8;
  Tensor logits = RandomTensor({t, e}, seed, DType::kF64, -2, 2), bias = RandomTensor({e}, seed + 1, DType::kF64, -0.1, 0.1);
  Tensor gw = RandomTensor({t, cfg.top_k}, seed + 2), gs = RandomTensor({t, e}, seed + 3);
  Routed base = Route(logits, bias, cfg);
  auto loss = [&] {
    Routed r = Route(logits, bias, cfg);
    for (int64_t i = 0; i < r.idx.numel(); ++i) EXPECT_EQ(r.idx.data<int32_t>()[i], base.idx.data<int32_t>()[i]) << "selection moved";
    return Dot(r.w, gw) + Dot(r.scores, gs);
  };
  Tensor dlogits = Tensor::Empty({t, e}, DType::kF64);
  Poison(dlogits);
  RouterBackward(base.scores, base.idx, gw, gs, cfg, dlogits);
  EXPECT_TRUE(GradientMatches(loss, logits, dlogits));
}

TEST(Router, BackwardMatchesFiniteDifferences) {
  CheckBackward({.top_k = 2, .num_groups = 4, .topk_groups = 2, .sigmoid = true, .route_scale = 2.5, .use_bias = true}, 10);
  CheckBackward({.top_k = 3, .num_groups = 1, .topk_groups = 1, .sigmoid = false, .route_scale = 1.5, .use_bias = false}, 20);
  CheckBackward({.top_k = 1, .num_groups = 2, .topk_groups = 1, .sigmoid = true, .route_scale = 1.0, .use_bias = true}, 30);
  CheckBackward({.top_k = 8, .num_groups = 1, .topk_groups = 1, .sigmoid = true, .route_scale = 1.0, .use_bias = false}, 40);
}

TEST(SeqAuxLoss, MatchesTheDefinitionAndItsGradient) {
  const int64_t seqs = 3, len = 5, e = 6, k = 2;
  Tensor scores = RandomTensor({seqs * len, e}, 1, DType::kF64, 0.05, 0.95);
  Tensor idx = Tensor::Empty({seqs * len, k}, DType::kI32);
  Rng rng(2);
  for (int64_t t = 0; t < seqs * len; ++t) {
    const int32_t a = static_cast<int32_t>(rng.Below(e));
    idx.data<int32_t>()[t * k] = a;
    idx.data<int32_t>()[t * k + 1] = (a + 1 + static_cast<int32_t>(rng.Below(e - 1))) % e;
  }
  const double coeff = 0.3;
  const auto s = Values(scores);
  double ref = 0;
  for (int64_t q = 0; q < seqs; ++q) {
    std::vector<double> f(e, 0), p(e, 0);
    for (int64_t t = q * len; t < (q + 1) * len; ++t) {
      for (int64_t j = 0; j < k; ++j) f[static_cast<size_t>(idx.data<int32_t>()[t * k + j])] += 1;
      double sum = 0;
      for (int64_t i = 0; i < e; ++i) sum += s[static_cast<size_t>(t * e + i)];
      for (int64_t i = 0; i < e; ++i) p[static_cast<size_t>(i)] += s[static_cast<size_t>(t * e + i)] / sum / len;
    }
    for (int64_t i = 0; i < e; ++i) ref += coeff * (static_cast<double>(e) / (k * len)) * f[static_cast<size_t>(i)] * p[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(SeqAuxLoss(scores, idx, seqs, len, coeff, Tensor()), ref, 1e-12);
  Tensor ds = Tensor::Zeros(scores.shape(), DType::kF64);
  SeqAuxLoss(scores, idx, seqs, len, coeff, ds);
  EXPECT_TRUE(GradientMatches([&] { return SeqAuxLoss(scores, idx, seqs, len, coeff, Tensor()); }, scores, ds));
}

}  // namespace
}  // namespace moe::kernels
