// The CPU RoPE: a cos/sin table per call (computed in double, then rounded), rotations in place.
#include <cmath>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moe::kernels::cpu {
namespace {

template <typename T>
void Rotate(T* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse) {
  const int64_t half = head_dim / 2, width = 3 * heads * head_dim;
  // cos/sin table [seq_len, half], computed in double then rounded.
  std::vector<T> cos_t(static_cast<size_t>(seq_len * half)), sin_t(static_cast<size_t>(seq_len * half));
  for (int64_t p = 0; p < seq_len; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      const double angle = static_cast<double>(p) * freq;
      cos_t[static_cast<size_t>(p * half + i)] = static_cast<T>(std::cos(angle));
      sin_t[static_cast<size_t>(p * half + i)] = static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
    }
  }
  ParallelFor(tokens, 2 * heads * head_dim * 3, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pos = t % seq_len;
      const T* c = cos_t.data() + pos * half;
      const T* s = sin_t.data() + pos * half;
      for (int64_t part = 0; part < 2; ++part) {  // q, then k
        for (int64_t h = 0; h < heads; ++h) {
          T* x = qkv + t * width + part * heads * head_dim + h * head_dim;
          for (int64_t i = 0; i < half; ++i) {
            const T x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c[i] - x2 * s[i];
            x[i + half] = x1 * s[i] + x2 * c[i];
          }
        }
      }
    }
  });
}

}  // namespace

void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  if (HasBf16({&qkv})) {
    Bf16Scope s;
    RopeForward(s.Out(qkv, true), seq_len, heads, head_dim, theta);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(qkv.dtype(), T, Rotate<T>(qkv.data<T>(), qkv.dim(0), seq_len, heads, head_dim, theta, false));
}

void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  if (HasBf16({&dqkv})) {
    Bf16Scope s;
    RopeBackward(s.Out(dqkv, true), seq_len, heads, head_dim, theta);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(dqkv.dtype(), T, Rotate<T>(dqkv.data<T>(), dqkv.dim(0), seq_len, heads, head_dim, theta, true));
}

}  // namespace moe::kernels::cpu
