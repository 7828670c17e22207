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
  RouterConfig cfg{.top_k = 2,
                   .num_groups = 1,
                   .topk_groups = 1,
                   .sigmoid = true,
                   .route_scale = 2.5,
                   .use_bias = true};
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
  // g0 = s(2)+s(-5), g1 = s(1.5)+s(1.4), g2 = s(-1)+s(-1). Group 1 wins although expert 0 is the
  // best.
  RouterConfig cfg{.top_k = 2,
                   .num_groups = 3,
                   .topk_groups = 1,
                   .sigmoid = true,
                   .route_scale = 1.0,
                   .use_bias = true};
  Tensor logits = Logits({2.0, -5.0, 1.5, 1.4, -1.0, -1.0}, 6);
  Tensor bias = Tensor::Zeros({6}, DType::kF64);
  Routed r = Route(logits, bias, cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 2);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 3);
  // Without the bias in use a group scores by its maximum: group 0 (expert 0) wins, and only its
  // two experts are eligible.
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
  RouterConfig cfg{.top_k = 2,
                   .num_groups = 1,
                   .topk_groups = 1,
                   .sigmoid = false,
                   .route_scale = 1.0,
                   .use_bias = false};
  Tensor logits = Logits({1.0, 1.0, 1.0, 1.0}, 4);
  Routed r = Route(logits, Tensor::Zeros({4}, DType::kF64), cfg);
  EXPECT_EQ(r.idx.data<int32_t>()[0], 0);
  EXPECT_EQ(r.idx.data<int32_t>()[1], 1);
  EXPECT_NEAR(r.w.data<double>()[0], 0.25, 1e-12);
  EXPECT_NEAR(r.w.data<double>()[1], 0.25, 1e-12);
}

TEST(Router, TopKEqualsNumExpertsAndTopOne) {
  for (int64_t k : {1, 5}) {
    RouterConfig cfg{.top_k = k,
                     .num_groups = 1,
                     .topk_groups = 1,
                     .sigmoid = true,
                     .route_scale = 1.0,
                     .use_bias = true};
    Tensor logits = RandomTensor({9, 5}, 3, DType::kF64, -3, 3);
    Routed r = Route(logits, RandomTensor({5}, 4), cfg);
    for (int64_t t = 0; t < 9; ++t) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += r.w.data<double>()[t * k + j];
      EXPECT_NEAR(sum, 1.0, 1e-12);  // normalised sigmoid weights sum to route_scale
      if (k == 5) {
        std::vector<bool> seen(5, false);
        for (int64_t j = 0; j < k; ++j)
          seen[static_cast<size_t>(r.idx.data<int32_t>()[t * k + j])] = true;
        for (bool s : seen) EXPECT_TRUE(s);
      }
    }
  }
}

// d/dlogits of sum(w * G) + sum(scores * H), with the selection held fixed.
void CheckBackward(RouterConfig cfg, uint64_t seed) {
  const int64_t t = 7, e = 8;
  Tensor logits = RandomTensor({t, e}, seed, DType::kF64, -2, 2),
         bias = RandomTensor({e}, seed + 1, DType::kF64, -0.1, 0.1);
  Tensor gw = RandomTensor({t, cfg.top_k}, seed + 2), gs = RandomTensor({t, e}, seed + 3);
  Routed base = Route(logits, bias, cfg);
  auto loss = [&] {
    Routed r = Route(logits, bias, cfg);
    for (int64_t i = 0; i < r.idx.numel(); ++i)
      EXPECT_EQ(r.idx.data<int32_t>()[i], base.idx.data<int32_t>()[i]) << "selection moved";
    return Dot(r.w, gw) + Dot(r.scores, gs);
  };
  Tensor dlogits = Tensor::Empty({t, e}, DType::kF64);
  Poison(dlogits);
  RouterBackward(base.scores, base.idx, gw, gs, cfg, dlogits);
  EXPECT_TRUE(GradientMatches(loss, logits, dlogits));
}

TEST(Router, BackwardMatchesFiniteDifferences) {
  CheckBackward({.top_k = 2,
                 .num_groups = 4,
                 .topk_groups = 2,
                 .sigmoid = true,
                 .route_scale = 2.5,
                 .use_bias = true},
                10);
  CheckBackward({.top_k = 3,
                 .num_groups = 1,
                 .topk_groups = 1,
                 .sigmoid = false,
                 .route_scale = 1.5,
                 .use_bias = false},
                20);
  CheckBackward({.top_k = 1,
                 .num_groups = 2,
                 .topk_groups = 1,
                 .sigmoid = true,
                 .route_scale = 1.0,
                 .use_bias = true},
                30);
  CheckBackward({.top_k = 8,
                 .num_groups = 1,
                 .topk_groups = 1,
                 .sigmoid = true,
                 .route_scale = 1.0,
                 .use_bias = false},
                40);
}

// The reference: f from each token's top_k of the unbiased scores over all experts (ties to the
// lower index), written out directly.
double RefSeqAux(const std::vector<double>& s, int64_t seqs, int64_t len, int64_t e, int64_t k,
                 double coeff, std::vector<std::vector<double>>* counts) {
  double ref = 0;
  counts->clear();
  for (int64_t q = 0; q < seqs; ++q) {
    std::vector<double> f(static_cast<size_t>(e), 0), p(static_cast<size_t>(e), 0);
    for (int64_t t = q * len; t < (q + 1) * len; ++t) {
      std::vector<bool> taken(static_cast<size_t>(e), false);
      for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t i = 0; i < e; ++i) {
          if (!taken[static_cast<size_t>(i)] &&
              (best < 0 ||
               s[static_cast<size_t>(t * e + i)] > s[static_cast<size_t>(t * e + best)]))
            best = i;
        }
        taken[static_cast<size_t>(best)] = true;
        f[static_cast<size_t>(best)] += 1;
      }
      double sum = 0;
      for (int64_t i = 0; i < e; ++i) sum += s[static_cast<size_t>(t * e + i)];
      for (int64_t i = 0; i < e; ++i)
        p[static_cast<size_t>(i)] +=
            s[static_cast<size_t>(t * e + i)] / sum / static_cast<double>(len);
    }
    counts->push_back(f);
    for (int64_t i = 0; i < e; ++i)
      ref += coeff * (static_cast<double>(e) / static_cast<double>(k * len)) *
             f[static_cast<size_t>(i)] * p[static_cast<size_t>(i)];
  }
  return ref;
}

TEST(SeqAuxLoss, MatchesTheDefinitionAndItsGradient) {
  const int64_t seqs = 3, len = 5, e = 6, k = 2;
  Tensor scores = RandomTensor({seqs * len, e}, 1, DType::kF64, 0.05, 0.95);
  const double coeff = 0.3;
  std::vector<std::vector<double>> counts;
  const double ref = RefSeqAux(Values(scores), seqs, len, e, k, coeff, &counts);
  EXPECT_NEAR(SeqAuxLoss(scores, k, seqs, len, coeff, Tensor()), ref, 1e-12);
  Tensor ds = Tensor::Zeros(scores.shape(), DType::kF64);
  SeqAuxLoss(scores, k, seqs, len, coeff, ds);
  EXPECT_TRUE(GradientMatches([&] { return SeqAuxLoss(scores, k, seqs, len, coeff, Tensor()); },
                              scores, ds));
}

// The paper's eq. 18: the balance loss counts the top-k of the UNBIASED scores over all experts,
// not the biased, group-limited selection the router made. Here a strong bias and a group limit
// send every token elsewhere; the loss must still be the unbiased top-k's.
TEST(SeqAuxLoss, CountsTheUnbiasedTopKNotTheRoutersSelection) {
  const int64_t seqs = 2, len = 4, e = 8, k = 2;
  Tensor scores = RandomTensor({seqs * len, e}, 3, DType::kF64, 0.05, 0.95);
  // The router's choice with a bias that favours experts 6 and 7 in group 3 of 4.
  Tensor logits = Tensor::Empty({seqs * len, e}, DType::kF64);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const double p = scores.data<double>()[i];
    logits.data<double>()[i] = std::log(p / (1 - p));  // sigmoid(logit) = p
  }
  Tensor bias = Tensor::Zeros({e}, DType::kF64);
  bias.data<double>()[6] = bias.data<double>()[7] = 5.0;
  Tensor sc = Tensor::Empty({seqs * len, e}, DType::kF64),
         idx = Tensor::Empty({seqs * len, k}, DType::kI32);
  Tensor w = Tensor::Empty({seqs * len, k}, DType::kF64);
  RouterForward(logits, bias,
                {.top_k = k,
                 .num_groups = 4,
                 .topk_groups = 1,
                 .sigmoid = true,
                 .route_scale = 1.0,
                 .use_bias = true},
                sc, idx, w);
  for (int32_t chosen : idx.ToVector<int32_t>())
    ASSERT_GE(chosen, 6) << "the bias steers selection to experts 6 and 7";
  std::vector<std::vector<double>> counts;
  const double ref = RefSeqAux(Values(sc), seqs, len, e, k, 1.0, &counts);
  // The unbiased top-k does not all fall on 6 and 7 (else this test proves nothing).
  double elsewhere = 0;
  for (const auto& f : counts)
    for (int64_t i = 0; i < 6; ++i) elsewhere += f[static_cast<size_t>(i)];
  ASSERT_GT(elsewhere, 0);
  EXPECT_NEAR(SeqAuxLoss(sc, k, seqs, len, 1.0, Tensor()), ref, 1e-12);
}

}  // namespace
}  // namespace moe::kernels
