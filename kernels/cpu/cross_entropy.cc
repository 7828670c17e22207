// The CPU cross-entropy fused with softmax; row losses added in row order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

double CrossEntropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                    const Tensor& dlogits) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (HasBf16({&logits, &dlogits})) {
    Bf16Scope s;
    return CrossEntropy(s.In(logits), targets, grad_scale, s.Out(dlogits));
  }
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    MOE_CHECK(tgt[r] >= 0 && tgt[r] < vocab)
        << "target " << tgt[r] << " outside the vocabulary of " << vocab;
  }
  std::vector<double> losses(static_cast<size_t>(rows));
  MOE_CPU_FLOAT_DISPATCH(logits.dtype(), T, {
    const T* x = logits.data<T>();
    T* dx = dlogits.defined() ? dlogits.data<T>() : nullptr;
    const T scale = static_cast<T>(grad_scale);
    ParallelFor(rows, vocab * 4, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = x + r * vocab;
        T mx = row[0];
        for (int64_t j = 1; j < vocab; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
        for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - mx);
        const T lse = mx + std::log(sum);
        losses[static_cast<size_t>(r)] = static_cast<double>(lse - row[tgt[r]]);
        if (dx != nullptr) {
          T* drow = dx + r * vocab;
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < vocab; ++j) drow[j] = std::exp(row[j] - mx) * inv * scale;
          drow[tgt[r]] -= scale;
        }
      }
    });
  });
  double total = 0;
  for (double l : losses) total += l;
  return total;
}

}  // namespace moe::kernels::cpu
