// The CPU RoPE: a cos/sin table per call (angles in double, then rounded), rotations in place on a
// block of columns of every head.
#include <cmath>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {
namespace {

template <typename T>
void Rotate(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq,
            RopeLayout layout, bool inverse, int64_t first_position) {
  const int64_t half = inv_freq.numel(), stride = x.dim(1) / heads, tokens = x.dim(0);
  std::vector<double> freq;
  if (inv_freq.dtype() == DType::kF64) {
    freq = inv_freq.ToVector<double>();
  } else {
    for (float f : inv_freq.ToVector<float>()) freq.push_back(f);
  }
  // cos/sin table [seq_len, half] of positions first_position.., computed in double then rounded.
  std::vector<T> cos_t(static_cast<size_t>(seq_len * half)),
      sin_t(static_cast<size_t>(seq_len * half));
  for (int64_t p = 0; p < seq_len; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(first_position + p) * freq[static_cast<size_t>(i)];
      cos_t[static_cast<size_t>(p * half + i)] = static_cast<T>(std::cos(angle));
      sin_t[static_cast<size_t>(p * half + i)] =
          static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
    }
  }
  // Pair i is (a_i, b_i): (i, i + half) half-split, (2i, 2i + 1) in pairs.
  const int64_t a_step = layout == RopeLayout::kPairs ? 2 : 1;
  const int64_t b_off = layout == RopeLayout::kPairs ? 1 : half;
  T* data = x.data<T>();
  ParallelFor(tokens, heads * half * 6, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pos = t % seq_len;
      const T* c = cos_t.data() + pos * half;
      const T* s = sin_t.data() + pos * half;
      for (int64_t h = 0; h < heads; ++h) {
        T* row = data + t * x.dim(1) + h * stride + offset;
        for (int64_t i = 0; i < half; ++i) {
          T& x1 = row[i * a_step];
          T& x2 = row[i * a_step + b_off];
          const T v1 = x1, v2 = x2;
          x1 = v1 * c[i] - v2 * s[i];
          x2 = v1 * s[i] + v2 * c[i];
        }
      }
    }
  });
}

void Rope(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset, const Tensor& inv_freq,
          RopeLayout layout, bool inverse, int64_t first_position) {
  if (HasBf16({&x})) {
    Bf16Scope s;
    Rope(s.Out(x, true), seq_len, heads, offset, s.In(inv_freq), layout, inverse, first_position);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(
      x.dtype(), T,
      Rotate<T>(x, seq_len, heads, offset, inv_freq, layout, inverse, first_position));
}

}  // namespace

void RopeForward(const Tensor& x, int64_t seq_len, int64_t heads, int64_t offset,
                 const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  Rope(x, seq_len, heads, offset, inv_freq, layout, false, first_position);
}

void RopeBackward(const Tensor& dx, int64_t seq_len, int64_t heads, int64_t offset,
                  const Tensor& inv_freq, RopeLayout layout, int64_t first_position) {
  Rope(dx, seq_len, heads, offset, inv_freq, layout, true, first_position);
}

}  // namespace moe::kernels::cpu
