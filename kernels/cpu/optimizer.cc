// The CPU AdamW, fused over one parameter tensor.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/common.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cpu {

namespace {

// Moments stored as M (float, double, or bf16), computed in T.
template <typename T, typename M>
T Load(const M& m) {
  if constexpr (std::is_same_v<M, BFloat16>) {
    return static_cast<T>(FromBFloat16(m));
  } else {
    return static_cast<T>(m);
  }
}
template <typename M, typename T>
M Store(T v) {
  if constexpr (std::is_same_v<M, BFloat16>) {
    return ToBFloat16(static_cast<float>(v));
  } else {
    return static_cast<M>(v);
  }
}

template <typename T, typename M>
void Update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
            const AdamWConfig& cfg) {
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(cfg.step));
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  M* mp = m.data<M>();
  M* vp = v.data<M>();
  const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2),
          eps = static_cast<T>(cfg.eps);
  const double scale = cfg.norm_sq != nullptr
                           ? ClipScale(cfg.norm_sq[0], cfg.norm_sq[1], cfg.grad_clip, cfg.norm_fp32)
                           : cfg.grad_scale;
  if (scale != scale || (cfg.norm_sq != nullptr && cfg.norm_sq[2] != 0))
    return;  // skipped: a non-finite norm, a bad batch
  const T lr = static_cast<T>(cfg.lr), wd = static_cast<T>(cfg.weight_decay),
          gs = static_cast<T>(scale);
  const T inv_bc1 = static_cast<T>(1.0 / bc1), inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
  ParallelFor(param.numel(), 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T gi = g[i] * gs;
      const T mi = b1 * Load<T>(mp[i]) + (T(1) - b1) * gi;
      const T vi = b2 * Load<T>(vp[i]) + (T(1) - b2) * gi * gi;
      mp[i] = Store<M>(mi);
      vp[i] = Store<M>(vi);
      const T update = (mi * inv_bc1) / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
      p[i] -= lr * (update + wd * p[i]);
    }
  });
}

}  // namespace

void AdamW(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWConfig& cfg) {
  MOE_CHECK(!HasBf16({&param, &grad})) << "AdamW updates fp32 master weights with fp32 gradients";
  MOE_CHECK(m.dtype() == v.dtype()) << "AdamW: the moments share a dtype";
  if (m.dtype() == DType::kBF16) {
    MOE_CHECK(param.dtype() == DType::kF32) << "AdamW: bf16 moments go with fp32 master weights";
    Update<float, BFloat16>(param, grad, m, v, cfg);
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(param.dtype(), T, Update<T, T>(param, grad, m, v, cfg));
}

}  // namespace moe::kernels::cpu
