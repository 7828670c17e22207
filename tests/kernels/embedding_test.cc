#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/elementwise.h"
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

// The accumulating form adds, to an f64 table, each used row's fp32 sum as EmbeddingBackward
// computes it into a zeroed fp32 table, bit for bit; unused rows keep their bits (NaN included).
TEST(Embedding, BackwardAccumulateAddsTheFloatRowSumsToF64) {
  const int64_t vocab = 13, d = 37;
  Tensor ids = Tensor::FromVector<int32_t>({3, 0, 3, 12, 3, 7, 0}, {7});
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor g = RandomTensor({7, d}, 3, DType::kF32);
    if (dt == DType::kBF16) {
      Tensor b = Tensor::Empty({7, d}, DType::kBF16);
      Convert(g, b);
      g = b;
    }
    Tensor sums = Tensor::Zeros({vocab, d}, DType::kF32);
    EmbeddingBackward(g, ids, sums);
    Tensor acc = RandomTensor({vocab, d}, 4, DType::kF64);
    acc.data<double>()[5 * d] = std::nan("");  // row 5 is used by no token
    const std::vector<double> before = acc.ToVector<double>();
    EmbeddingBackwardAccumulate(g, ids, acc);
    const std::vector<double> after = acc.ToVector<double>();
    for (int64_t i = 0; i < vocab * d; ++i) {
      const double want =
          before[static_cast<size_t>(i)] + static_cast<double>(sums.data<float>()[i]);
      ASSERT_EQ(std::memcmp(&want, &after[static_cast<size_t>(i)], sizeof(double)), 0)
          << DTypeName(dt) << " element " << i << ": " << after[static_cast<size_t>(i)] << ", want "
          << want;
    }
  }
}

}  // namespace
}  // namespace moe::kernels
