#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include "tests/testing/testing.h"

namespace moe::kernels {
namespace {

using namespace moe::testing;

TEST(Embedding, ForwardGathersRowsAndBackwardSumsRepeatedIds) {
  const int64_t vocab = 13, d = 5;
  Tensor table = RandomTensor({vocab, d}, 1);
  Tensor ids = Tensor::FromVector<int32_t>({3, 0, 3, 12, 3, 7}, {6});
  Tensor out = Tensor::Empty({6, d}, DType::kF64);
  Poison(out);
  EmbeddingForward(table, ids, out);
  const auto tv = Values(table), ov = Values(out);
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t j = 0; j < d; ++j)
      EXPECT_EQ(ov[static_cast<size_t>(t * d + j)],
                tv[static_cast<size_t>(ids.data<int32_t>()[t] * d + j)]);
  Tensor g = RandomTensor({6, d}, 2);
  auto loss = [&] {
    EmbeddingForward(table, ids, out);
    return Dot(out, g);
  };
  Tensor dtable = Tensor::Zeros({vocab, d}, DType::kF64);
  EmbeddingBackward(g, ids, dtable);
  EXPECT_TRUE(GradientMatches(loss, table, dtable));
}

}  // namespace
}  // namespace moe::kernels
