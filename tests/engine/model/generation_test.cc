// Generation: decoding with MLA's latent cache gives the logits (and so the greedy tokens) of
// running the whole prefix again every step, with YaRN off and on, in f64 and f32; the cache holds
// kv_lora_rank + qk_rope_head_dim values per position and layer; MHA has no cache and says so; the
// sampler's greedy, top-k, top-p, temperature and seed.
#include "worker/engine/model/generation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "tests/testing/testing.h"
#include "worker/engine/parallel/local_communicator.h"

namespace moe {
namespace {

ModelConfig SmallMla() {
  ModelConfig m = *ModelPreset("tiny");
  m.vocab_size = 97;
  m.hidden_size = 32;
  m.num_heads = 3;
  m.num_layers = 3;
  m.first_k_dense = 1;
  m.dense_ffn_hidden = 40;
  m.mtp_depth = 0;
  m.init_std = 0.15;  // logits far enough apart that the greedy choice is not a near tie
  m.attention.q_lora_rank = 16;
  m.attention.kv_lora_rank = 12;
  m.attention.qk_nope_head_dim = 8;
  m.attention.qk_rope_head_dim = 6;
  m.attention.v_head_dim = 10;
  m.moe.ffn_hidden = 16;
  return m;
}

// A model with random selection biases (routing that depends on them), at `rope_length`.
std::unique_ptr<model::Model> MakeModel(const ModelConfig& m, const parallel::LocalParallel& local,
                                        DType dtype, int64_t rope_length) {
  model::ModelOptions o;
  o.dtype = dtype;
  o.max_seq_len = rope_length;
  auto model = std::make_unique<model::Model>(m, local.ctx, 7, o);
  Rng rng(3);
  for (model::MoeLayer* l : model->moe_layers()) {
    std::vector<float> b(static_cast<size_t>(m.moe.num_experts));
    for (auto& x : b) x = static_cast<float>(0.2 * (rng.Uniform() - 0.5));
    l->SetBias(b);
  }
  return model;
}

double MaxRelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (double x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(scale, 1e-30));
  return worst;
}

struct Case {
  DType dtype;
  bool yarn;
  double tol;
};

class CacheMatchesRecompute : public ::testing::TestWithParam<Case> {};

// Greedy decoding of 24 tokens after a 7-token prompt: at every step the cached pass's logits are
// the whole prefix's last row (within rounding), so the tokens are the same.
TEST_P(CacheMatchesRecompute, GreedyTokensAndEveryStepsLogits) {
  const Case c = GetParam();
  ModelConfig m = SmallMla();
  int64_t rope_length = 64;
  if (c.yarn) {
    m.rope_scaling = RopeScalingConfig{.type = "yarn",
                                       .factor = 4,
                                       .original_max_position_embeddings = 16,
                                       .beta_fast = 32,
                                       .beta_slow = 1,
                                       .mscale = 0.7,
                                       .mscale_all_dim = 0.7};
    rope_length = 64;  // above the original 16: YaRN applies
  }
  parallel::LocalParallel local;
  auto model = MakeModel(m, local, c.dtype, rope_length);
  auto cached = model::Generator::Create(*model, 40, /*use_cache=*/true);
  auto full = model::Generator::Create(*model, 40, /*use_cache=*/false);
  ASSERT_TRUE(cached.ok() && full.ok()) << cached.status() << full.status();
  const std::vector<int32_t> prompt = {2, 17, 45, 3, 88, 60, 9};
  ASSERT_TRUE(cached->Append(prompt).ok());
  ASSERT_TRUE(full->Append(prompt).ok());
  model::SamplingOptions greedy;
  greedy.temperature = 0;
  Rng rng(1);
  std::map<int32_t, int> distinct;
  for (int step = 0; step < 24; ++step) {
    ASSERT_LE(MaxRelDiff(cached->logits(), full->logits()), c.tol) << "step " << step;
    const int32_t a = model::SampleToken(cached->logits(), greedy, rng),
                  b = SampleToken(full->logits(), greedy, rng);
    ASSERT_EQ(a, b) << "step " << step;
    ++distinct[a];
    ASSERT_TRUE(cached->Append({a}).ok());
    ASSERT_TRUE(full->Append({b}).ok());
  }
  EXPECT_EQ(cached->tokens(), full->tokens());
  EXPECT_GE(distinct.size(), 3u) << "a degenerate model would make this comparison weak";
  EXPECT_EQ(cached->cache()->length(), 31);
}

INSTANTIATE_TEST_SUITE_P(Generation, CacheMatchesRecompute,
                         ::testing::Values(Case{DType::kF64, false, 1e-10},
                                           Case{DType::kF64, true, 1e-10},
                                           Case{DType::kF32, false, 1e-4},
                                           Case{DType::kF32, true, 1e-4}),
                         [](const auto& info) {
                           return std::string(info.param.dtype == DType::kF64 ? "f64" : "f32") +
                                  (info.param.yarn ? "_yarn" : "_no_yarn");
                         });

TEST(Generation, TheCacheHoldsTheLatentAndTheRotaryKeyPerPositionAndLayer) {
  const ModelConfig m = SmallMla();
  parallel::LocalParallel local;
  auto model = MakeModel(m, local, DType::kF32, 64);
  auto cache = model->NewDecodeCache(50);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->layers.size(), static_cast<size_t>(m.num_layers));
  EXPECT_EQ(cache->values_per_layer(),
            m.attention.kv_lora_rank + m.attention.qk_rope_head_dim);  // 12 + 6
  for (const model::LayerKvCache& l : cache->layers) {
    EXPECT_EQ(l.rows.shape(), (Tensor::Shape{50, 18}));
    EXPECT_EQ(l.length, 0);
  }
  // Full heads would be 2 * H * (d_nope + d_rope) for keys and values: far more per position.
  EXPECT_LT(cache->values_per_layer(),
            m.num_heads * (m.attention.qk_head_dim() + m.attention.v_head_dim));
  // Prefilling in pieces is prefilling at once.
  auto once = model::Generator::Create(*model, 50, true),
       pieces = model::Generator::Create(*model, 50, true);
  ASSERT_TRUE(once->Append({5, 6, 7, 8, 9}).ok());
  ASSERT_TRUE(pieces->Append({5, 6}).ok());
  ASSERT_TRUE(pieces->Append({7}).ok());
  ASSERT_TRUE(pieces->Append({8, 9}).ok());
  EXPECT_LE(MaxRelDiff(once->logits(), pieces->logits()), 1e-5);
  // Past its capacity: a clear error, not a write out of bounds.
  auto small = model::Generator::Create(*model, 4, true);
  const Status st = small->Append({1, 2, 3, 4, 5});
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st;
}

TEST(Generation, MhaDecodesByRecomputingAndSaysItHasNoCache) {
  ModelConfig m = SmallMla();
  m.attention.type = "mha";
  m.num_heads = 4;
  parallel::LocalParallel local;
  model::Model model(m, local.ctx, 7, DType::kF32, Device::Cpu());
  auto cache = model.NewDecodeCache(8);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(cache.status().message().find("mha"), std::string::npos) << cache.status();
  auto g = model::Generator::Create(model, 8, false);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->Append({1, 2, 3}).ok());
  EXPECT_EQ(g->logits().size(), 97u);
}

TEST(Sampling, GreedyTopKTopPTemperatureAndSeed) {
  const std::vector<double> logits = {0.5, 2.0, 2.0, -1.0, 1.0};
  Rng rng(5);
  model::SamplingOptions o;
  o.temperature = 0;
  EXPECT_EQ(model::SampleToken(logits, o, rng), 1)
      << "greedy: the most likely, ties to the lower id";
  o.temperature = 5;
  o.top_k = 1;
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(model::SampleToken(logits, o, rng), 1) << "top-k 1 is greedy";
  o.top_k = 0;
  o.top_p = 1e-6;
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(model::SampleToken(logits, o, rng), 1) << "a tiny top-p too";
  // top-k 3 at T = 1: only ids 1, 2 and 4, in proportion to exp(logit).
  o.temperature = 1;
  o.top_p = 1;
  o.top_k = 3;
  std::map<int32_t, int> count;
  const int n = 30000;
  for (int i = 0; i < n; ++i) ++count[model::SampleToken(logits, o, rng)];
  EXPECT_EQ(count.size(), 3u);
  const double z = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(count[1] / double(n), std::exp(2.0) / z, 0.015);
  EXPECT_NEAR(count[2] / double(n), std::exp(2.0) / z, 0.015);
  EXPECT_NEAR(count[4] / double(n), std::exp(1.0) / z, 0.015);
  // top-p 0.8 at T = 1 over all five: the top three hold 0.88 of the mass, the top two 0.66.
  o.top_k = 0;
  o.top_p = 0.8;
  count.clear();
  for (int i = 0; i < 3000; ++i) ++count[model::SampleToken(logits, o, rng)];
  EXPECT_EQ(count.size(), 3u);
  EXPECT_EQ(count.count(0) + count.count(3), 0u);
  // The same seed, the same draws; another seed, others.
  auto draws = [&](uint64_t seed) {
    Rng r(seed);
    model::SamplingOptions s;
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(model::SampleToken(logits, s, r));
    return out;
  };
  EXPECT_EQ(draws(11), draws(11));
  EXPECT_NE(draws(11), draws(12));
}

}  // namespace
}  // namespace moe
