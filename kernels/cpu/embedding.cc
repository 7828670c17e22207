// The CPU embedding lookup and its deterministic gradient.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

void EmbeddingForward(const Tensor& table, const Tensor& ids, const Tensor& out) {
  if (HasBf16({&table, &out})) {
    Bf16Scope s;
    EmbeddingForward(s.In(table), ids, s.Out(out));
    return;
  }
  const int64_t tokens = ids.numel(), d = table.dim(1), vocab = table.dim(0);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    MOE_CHECK(id[t] >= 0 && id[t] < vocab)
        << "token id " << id[t] << " outside the vocabulary of " << vocab;
  }
  MOE_CPU_FLOAT_DISPATCH(out.dtype(), T, {
    const T* tab = table.data<T>();
    T* o = out.data<T>();
    ParallelFor(tokens, d, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        std::memcpy(o + t * d, tab + id[t] * d, sizeof(T) * static_cast<size_t>(d));
    });
  });
}

namespace {

// Token positions grouped by id (a counting sort): row v's tokens are order[start[v], start[v+1])
// in token order, and `used` lists the rows some token uses.
struct TokensById {
  std::vector<int64_t> start, order;
  std::vector<int32_t> used;
};

TokensById GroupById(const Tensor& ids, int64_t vocab) {
  const int64_t tokens = ids.numel();
  const int32_t* id = ids.data<int32_t>();
  TokensById g;
  g.start.assign(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    MOE_CHECK(id[t] >= 0 && id[t] < vocab)
        << "token id " << id[t] << " outside the vocabulary of " << vocab;
    ++g.start[static_cast<size_t>(id[t]) + 1];
  }
  for (int64_t v = 0; v < vocab; ++v)
    g.start[static_cast<size_t>(v) + 1] += g.start[static_cast<size_t>(v)];
  g.order.resize(static_cast<size_t>(tokens));
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (int64_t t = 0; t < tokens; ++t)
    g.order[static_cast<size_t>(fill[static_cast<size_t>(id[t])]++)] = t;
  for (int64_t v = 0; v < vocab; ++v)
    if (g.start[static_cast<size_t>(v) + 1] > g.start[static_cast<size_t>(v)])
      g.used.push_back(static_cast<int32_t>(v));
  return g;
}

// row[0, d) += the rows of g (in T) of row v's tokens, in token order.
template <typename T>
void SumRow(const TokensById& g, const T* dout, int64_t d, int64_t v, T* row) {
  for (int64_t p = g.start[static_cast<size_t>(v)]; p < g.start[static_cast<size_t>(v) + 1]; ++p) {
    const T* src = dout + g.order[static_cast<size_t>(p)] * d;
    for (int64_t j = 0; j < d; ++j) row[j] += src[j];
  }
}

}  // namespace

// Each vocabulary row is summed by one thread, in token order, with no atomics.
void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  if (HasBf16({&dout, &dtable})) {
    Bf16Scope s;
    EmbeddingBackward(s.In(dout), ids, s.Out(dtable, true));
    return;
  }
  const int64_t d = dtable.dim(1);
  const TokensById g = GroupById(ids, dtable.dim(0));
  MOE_CPU_FLOAT_DISPATCH(dtable.dtype(), T, {
    const T* grad = dout.data<T>();
    T* tab = dtable.data<T>();
    ParallelFor(static_cast<int64_t>(g.used.size()), d * 4, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t v = g.used[static_cast<size_t>(u)];
        SumRow(g, grad, d, v, tab + v * d);
      }
    });
  });
}

void EmbeddingBackwardAccumulate(const Tensor& dout, const Tensor& ids, const Tensor& acc) {
  if (HasBf16({&dout})) {
    Bf16Scope s;
    EmbeddingBackwardAccumulate(s.In(dout), ids, acc);
    return;
  }
  const int64_t d = acc.dim(1);
  const TokensById g = GroupById(ids, acc.dim(0));
  const float* grad = dout.data<float>();
  double* out = acc.data<double>();
  ParallelFor(static_cast<int64_t>(g.used.size()), d * 4, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(d));
    for (int64_t u = b; u < e; ++u) {
      const int64_t v = g.used[static_cast<size_t>(u)];
      std::fill(row.begin(), row.end(), 0.0f);
      SumRow(g, grad, d, v, row.data());
      double* to = out + v * d;
      for (int64_t j = 0; j < d; ++j) to[j] += static_cast<double>(row[static_cast<size_t>(j)]);
    }
  });
}

}  // namespace moe::kernels::cpu
