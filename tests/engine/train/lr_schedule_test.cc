#include <gtest/gtest.h>

#include <cmath>

#include "worker/engine/train/optimizer.h"

namespace moe {
namespace {

TEST(LearningRate, WarmupThenCosineToMinThenFlat) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(train::LearningRate(o, 110, 1), 0.1);
  EXPECT_DOUBLE_EQ(train::LearningRate(o, 110, 10), 1.0);
  EXPECT_NEAR(train::LearningRate(o, 110, 60), 0.55, 1e-12);  // half-way down the cosine
  EXPECT_DOUBLE_EQ(train::LearningRate(o, 110, 110), 0.1);
  EXPECT_DOUBLE_EQ(train::LearningRate(o, 110, 500), 0.1);
  for (int64_t s = 11; s < 110; ++s)
    EXPECT_LE(train::LearningRate(o, 110, s + 1), train::LearningRate(o, 110, s)) << s;
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(train::LearningRate(o, 100, 0), 1.0);
}

}  // namespace
}  // namespace moe
