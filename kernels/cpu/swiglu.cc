#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/cpu/parallel.h"
#ifdef MOE_WITH_CUDA
#include "kernels/cuda/ops.h"
#endif

namespace moe::kernels {

void SwigluForward(const Tensor& gate_up, const Tensor& out) {
  const int64_t rows = gate_up.dim(0), f = out.dim(1);
  MOE_CHECK(gate_up.dim(1) == 2 * f && out.dim(0) == rows) << "SwigluForward: gate_up " << gate_up.ShapeString() << ", out " << out.ShapeString();
  MOE_DISPATCH_CUDA(out, SwigluForward(gate_up, out));
  if (cpu::HasBf16({&gate_up, &out})) {
    cpu::Bf16Scope s;
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
  MOE_CHECK(gate_up.dim(1) == 2 * f && dout.dim(0) == rows && dgate_up.shape() == gate_up.shape()) << "SwigluBackward shapes";
  MOE_DISPATCH_CUDA(dgate_up, SwigluBackward(gate_up, dout, dgate_up));
  if (cpu::HasBf16({&gate_up, &dout, &dgate_up})) {
    cpu::Bf16Scope s;
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

}  // namespace moe::kernels
