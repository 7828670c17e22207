// The initialisation docs/job-spec.md describes (init_std): weights N(0, init_std), the output
// projections N(0, init_std / sqrt(2 * num_layers)) (Megatron's rule), norms at 1.
#include <gtest/gtest.h>

#include <cmath>

#include "worker/engine/model/model.h"
#include "worker/engine/parallel/local_communicator.h"

namespace moe {
namespace {

double Std(const Tensor& t) {
  const std::vector<float> v = t.ToVector<float>();
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(Init, OutputProjectionsFollowMegatronsRule) {
  ModelConfig m = *ModelPreset("tiny");  // 4 layers, MLA, a dense first block, MoE after
  m.init_std = 0.02;
  parallel::LocalParallel local;
  model::Model model(m, local.ctx, 1, DType::kF32, Device::Cpu());
  const double out = 0.02 / std::sqrt(2.0 * 4);
  const std::pair<const char*, double> want[] = {
      {"embedding", 0.02},
      {"layers.1.attn.q_a_proj", 0.02},
      {"layers.1.attn.kv_b_proj", 0.02},
      {"layers.1.moe.router", 0.02},
      {"layers.1.moe.experts.w13", 0.02},
      {"layers.0.ffn.w13", 0.02},
      {"layers.1.attn.o_proj", out},
      {"layers.0.ffn.w2", out},
      {"layers.1.moe.experts.w2", out},
      {"layers.1.moe.shared.w2", out},
  };
  for (const auto& [name, std] : want) {
    const model::Param* p = model.params().Find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_NEAR(Std(p->value), std, 0.05 * std) << name;
  }
  const model::Param* norm = model.params().Find("layers.1.attn_norm");
  ASSERT_NE(norm, nullptr);
  for (float x : norm->value.ToVector<float>()) ASSERT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace moe
