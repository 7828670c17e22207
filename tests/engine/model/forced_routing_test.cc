// moe.force_balanced_routing, the measurement setting every published MoE throughput record uses:
// the router's scores give way to random ones drawn on the device, so a router that sends every
// token to the same experts still spreads them evenly; each MoE layer draws its own; a recompute's
// forward (full recompute) routes as its first forward did, so the backward follows the routing
// that made the loss; and without the setting nothing changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "worker/engine/model/moe_layer.h"
#include "worker/engine/model/saved.h"
#include "worker/engine/parallel/dispatcher.h"

namespace moe {
namespace {

constexpr int64_t kTokens = 4096, kExperts = 8, kHidden = 16;

ModelConfig Config(bool forced) {
  ModelConfig cfg;
  cfg.hidden_size = kHidden;
  cfg.init_std = 0.02;
  cfg.moe = MoeConfig{.num_experts = kExperts,
                      .top_k = 2,
                      .num_shared_experts = 0,
                      .ffn_hidden = 8,
                      .num_groups = 1,
                      .topk_groups = 1,
                      .score_function = "sigmoid",
                      .route_scale = 1.0,
                      .bias_update_rate = 0,
                      .seq_aux_loss_coeff = 0};
  cfg.moe.force_balanced_routing = forced;
  return cfg;
}

// A layer whose router prefers experts 0 and 1 for every token of Input().
struct Layer {
  explicit Layer(bool forced, const std::string& name = "moe")
      : params(DType::kF32, Device::Cpu()),
        dispatcher(nullptr, kExperts, nullptr),
        layer(params, name, Config(forced), 1, 0.02, &dispatcher, DType::kF32, Device::Cpu()) {
    std::vector<float> w(kExperts * kHidden, 0.0f);
    for (int64_t j = 0; j < kHidden; ++j) w[j] = w[kHidden + j] = 1.0f;
    params.Find(name + ".router")->value.CopyFrom(Tensor::FromVector(w, {kExperts, kHidden}));
    params.SyncCompute();
  }
  std::vector<int64_t> Counts(const Tensor& x, model::MoeStats* stats) {
    auto out = layer.Forward(x, 1, kTokens, 0.0, stats);
    EXPECT_TRUE(out.ok()) << out.status();
    return stats->tokens_per_expert;
  }
  model::ParamSet params;
  parallel::TokenDispatcher dispatcher;
  model::MoeLayer layer;
};

Tensor Input() {
  Tensor x = Tensor::Empty({kTokens, kHidden}, DType::kF32);
  kernels::FillUniform(x, 5);
  std::vector<float> v = x.ToVector<float>();
  for (float& f : v) f = 0.5f + 0.5f * std::abs(f);  // positive: experts 0 and 1 score highest
  return Tensor::FromVector(v, {kTokens, kHidden});
}

TEST(ForcedRouting, ARouterThatPicksTwoExpertsStillSpreadsTheLoad) {
  const Tensor x = Input();
  {
    model::NoGradScope forward_only;
    Layer learned(false);
    model::MoeStats stats;
    const std::vector<int64_t> c = learned.Counts(x, &stats);
    EXPECT_EQ(c[0], kTokens);
    EXPECT_EQ(c[1], kTokens);
    for (int64_t e = 2; e < kExperts; ++e) EXPECT_EQ(c[static_cast<size_t>(e)], 0) << e;
  }
  model::NoGradScope forward_only;
  Layer forced(true);
  model::MoeStats stats;
  const std::vector<int64_t> c = forced.Counts(x, &stats);
  const double mean = 2.0 * kTokens / kExperts;  // 1,024
  for (int64_t e = 0; e < kExperts; ++e)
    EXPECT_NEAR(static_cast<double>(c[static_cast<size_t>(e)]) / mean, 1.0, 0.15)
        << "expert " << e << " got " << c[static_cast<size_t>(e)] << " of about " << mean;
}

TEST(ForcedRouting, LayersDrawApartAndEachDrawIsNew) {
  const Tensor x = Input();
  model::NoGradScope forward_only;
  Layer a(true, "layers.1.moe"), b(true, "layers.2.moe");
  model::MoeStats sa, sb, sa2;
  a.Counts(x, &sa);
  b.Counts(x, &sb);
  a.Counts(x, &sa2);
  EXPECT_NE(sa.routing.ToVector<int32_t>(), sb.routing.ToVector<int32_t>())
      << "two layers chose the same experts for every token";
  EXPECT_NE(sa.routing.ToVector<int32_t>(), sa2.routing.ToVector<int32_t>())
      << "a layer's second forward repeated its first's draw";
}

TEST(ForcedRouting, ARecomputeRoutesAsItsFirstForward) {
  const Tensor x = Input();
  Layer l(true);
  model::MoeStats first, second, again, again2;
  first.recompute_follows = second.recompute_follows = true;  // as a block under full recompute
  {
    model::NoGradScope keep_nothing;  // the first forwards keep nothing
    l.Counts(x, &first);
    l.Counts(x, &second);
  }
  again.want_aux = again2.want_aux = false;  // the recomputes, in the order the forwards ran
  l.Counts(x, &again);
  l.Counts(x, &again2);
  EXPECT_EQ(again.routing.ToVector<int32_t>(), first.routing.ToVector<int32_t>());
  EXPECT_EQ(again2.routing.ToVector<int32_t>(), second.routing.ToVector<int32_t>());
  EXPECT_NE(first.routing.ToVector<int32_t>(), second.routing.ToVector<int32_t>());
}

}  // namespace
}  // namespace moe
