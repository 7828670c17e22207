// The CPU embedding lookup and its deterministic gradient.
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

void EmbeddingBackward(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  if (HasBf16({&dout, &dtable})) {
    Bf16Scope s;
    EmbeddingBackward(s.In(dout), ids, s.Out(dtable, true));
    return;
  }
  const int64_t tokens = ids.numel(), d = dtable.dim(1), vocab = dtable.dim(0);
  const int32_t* id = ids.data<int32_t>();
  // Counting sort of token positions by id: each vocabulary row is then summed by one thread, in
  // token order, with no atomics.
  std::vector<int64_t> start(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) ++start[static_cast<size_t>(id[t]) + 1];
  for (int64_t v = 0; v < vocab; ++v)
    start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
  std::vector<int64_t> order(static_cast<size_t>(tokens));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t t = 0; t < tokens; ++t)
    order[static_cast<size_t>(fill[static_cast<size_t>(id[t])]++)] = t;
  std::vector<int32_t> used;
  for (int64_t v = 0; v < vocab; ++v)
    if (start[static_cast<size_t>(v) + 1] > start[static_cast<size_t>(v)])
      used.push_back(static_cast<int32_t>(v));
  MOE_CPU_FLOAT_DISPATCH(dtable.dtype(), T, {
    const T* g = dout.data<T>();
    T* tab = dtable.data<T>();
    ParallelFor(static_cast<int64_t>(used.size()), d * 4, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t v = used[static_cast<size_t>(u)];
        T* row = tab + v * d;
        for (int64_t p = start[static_cast<size_t>(v)]; p < start[static_cast<size_t>(v) + 1];
             ++p) {
          const T* src = g + order[static_cast<size_t>(p)] * d;
          for (int64_t j = 0; j < d; ++j) row[j] += src[j];
        }
      }
    });
  });
}

}  // namespace moe::kernels::cpu
