// The CPU AdamW, fused over one parameter tensor.
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moe::kernels::cpu {

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWConfig& cfg) {
  MOE_CHECK(!HasBf16({&param, &grad, &m, &v})) << "AdamW updates fp32 master weights with fp32 gradients and moments";
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(cfg.step));
  MOE_CPU_FLOAT_DISPATCH(param.dtype(), T, {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* mp = m.data<T>();
    T* vp = v.data<T>();
    const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2), eps = static_cast<T>(cfg.eps);
    const T lr = static_cast<T>(cfg.lr), wd = static_cast<T>(cfg.weight_decay), gs = static_cast<T>(cfg.grad_scale);
    const T inv_bc1 = static_cast<T>(1.0 / bc1), inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
    ParallelFor(param.numel(), 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T gi = g[i] * gs;
        mp[i] = b1 * mp[i] + (T(1) - b1) * gi;
        vp[i] = b2 * vp[i] + (T(1) - b2) * gi * gi;
        const T update = (mp[i] * inv_bc1) / (std::sqrt(vp[i]) * inv_sqrt_bc2 + eps);
        p[i] -= lr * (update + wd * p[i]);
      }
    });
  });
}

}  // namespace moe::kernels::cpu
