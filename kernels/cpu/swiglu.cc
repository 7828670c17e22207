// The CPU SwiGLU on a fused gate|up projection, and its backward.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  const int64_t rows = gate_up.dim(0), f = out.dim(1);
  if (HasBf16({&gate_up, &out})) {
    Bf16Scope s;
    SwigluForward(s.In(gate_up), s.Out(out));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(out.dtype(), T, {
    const T* gu = gate_up.data<T>();
    T* o = out.data<T>();
    ParallelFor(rows, f * 8, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* g = gu + r * 2 * f;
        const T* u = g + f;
        T* orow = o + r * f;
        for (int64_t j = 0; j < f; ++j) orow[j] = g[j] / (T(1) + std::exp(-g[j])) * u[j];
      }
    });
  });
}

void SwigluBackward(const Tensor& gate_up, const Tensor& dout, const Tensor& dgate_up) {
  const int64_t rows = gate_up.dim(0), f = dout.dim(1);
  if (HasBf16({&gate_up, &dout, &dgate_up})) {
    Bf16Scope s;
    SwigluBackward(s.In(gate_up), s.In(dout), s.Out(dgate_up));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(dgate_up.dtype(), T, {
    const T* gu = gate_up.data<T>();
    const T* go = dout.data<T>();
    T* dgu = dgate_up.data<T>();
    ParallelFor(rows, f * 8, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* g = gu + r * 2 * f;
        const T* u = g + f;
        const T* dy = go + r * f;
        T* dg = dgu + r * 2 * f;
        T* du = dg + f;
        for (int64_t j = 0; j < f; ++j) {
          const T sig = T(1) / (T(1) + std::exp(-g[j]));
          const T silu = g[j] * sig;
          du[j] = dy[j] * silu;
          dg[j] = dy[j] * u[j] * sig * (T(1) + g[j] * (T(1) - sig));
        }
      }
    });
  });
}

}  // namespace moe::kernels::cpu
