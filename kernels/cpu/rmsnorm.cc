// The CPU RMSNorm and its backward (dw summed over fixed blocks of rows, so in a fixed order).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, const Tensor& y,
                    const Tensor& rstd) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  if (HasBf16({&x, &w, &y, &rstd})) {
    Bf16Scope s;
    RmsNormForward(s.In(x), s.In(w), eps, s.Out(y), s.Out(rstd));
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(x.dtype(), T, {
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    T* yp = y.data<T>();
    T* rp = rstd.data<T>();
    ParallelFor(rows, d, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * d;
        T ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += xr[j] * xr[j];
        const T inv = T(1) / std::sqrt(ss / static_cast<T>(d) + static_cast<T>(eps));
        rp[r] = inv;
        T* yr = yp + r * d;
        for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * inv * wp[j];
      }
    });
  });
}

void RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  if (HasBf16({&dy, &x, &w, &rstd, &dx, &dw})) {
    Bf16Scope s;
    RmsNormBackward(s.In(dy), s.In(x), s.In(w), s.In(rstd), s.Out(dx), s.Out(dw, true));
    return;
  }
  constexpr int64_t kBlock = 64;  // rows per partial sum of dw: fixed, so the sum order is too
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  MOE_CPU_FLOAT_DISPATCH(x.dtype(), T, {
    const T* g = dy.data<T>();
    const T* xp = x.data<T>();
    const T* wp = w.data<T>();
    const T* rp = rstd.data<T>();
    T* dxp = dx.data<T>();
    std::vector<T> partial(static_cast<size_t>(blocks * d), T(0));
    ParallelFor(blocks, kBlock * d, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        T* acc = partial.data() + blk * d;
        for (int64_t r = blk * kBlock; r < std::min(rows, (blk + 1) * kBlock); ++r) {
          const T* gr = g + r * d;
          const T* xr = xp + r * d;
          const T inv = rp[r];
          T dot = 0;
          for (int64_t j = 0; j < d; ++j) dot += gr[j] * wp[j] * xr[j];
          const T coef = dot * inv * inv * inv / static_cast<T>(d);
          T* dxr = dxp + r * d;
          for (int64_t j = 0; j < d; ++j) {
            dxr[j] = gr[j] * wp[j] * inv - xr[j] * coef;
            acc[j] += gr[j] * xr[j] * inv;
          }
        }
      }
    });
    T* dwp = dw.data<T>();
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t j = 0; j < d; ++j) dwp[j] += partial[static_cast<size_t>(blk * d + j)];
  });
}

}  // namespace moe::kernels::cpu
