// Helpers shared by the CPU kernel files (kernels/cpu/<family>.cc): a parallel loop, the bf16
// scope, and the typed dispatch over f32 and f64.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "common/check.h"
#include "kernels/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace moe::kernels::cpu {

// Runs fn(begin, end) over [0, n) in contiguous chunks, one per thread; serially when the work is
// small (`cost` is the rough work per item, in multiply-adds). The split depends only on n and the
// thread count, so results are reproducible for a given thread count.
template <typename Fn>
void ParallelFor(int64_t n, int64_t cost, Fn&& fn) {
#ifdef _OPENMP
  if (n > 1 && n * cost >= 32768 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads();
      const int64_t t = omp_get_thread_num();
      const int64_t chunk = (n + threads - 1) / threads;
      const int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
      if (b < e) fn(b, e);
    }
    return;
  }
#endif
  (void)cost;
  if (n > 0) fn(int64_t{0}, n);
}

// Element i of a floating CPU tensor, as float or double.
template <typename T>
inline T LoadAs(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return static_cast<T>(t.data<float>()[i]);
    case DType::kF64:
      return static_cast<T>(t.data<double>()[i]);
    case DType::kBF16:
      return static_cast<T>(FromBFloat16(t.data<BFloat16>()[i]));
    default:
      MOE_CHECK(false) << "LoadAs takes floating tensors, got " << DTypeName(t.dtype());
  }
  return T(0);
}

// bf16 on the CPU: the kernels compute in fp32, so a call with bf16 tensors runs on fp32 copies and
// rounds its outputs back to bf16 when the scope ends. That is the arithmetic of the CUDA bf16
// kernels (load bf16, compute and accumulate in fp32, store bf16): the CPU reference for them, and
// the CPU path of bf16 training.
bool HasBf16(std::initializer_list<const Tensor*> tensors);

class Bf16Scope {
 public:
  Bf16Scope() = default;
  Bf16Scope(const Bf16Scope&) = delete;
  Bf16Scope& operator=(const Bf16Scope&) = delete;
  ~Bf16Scope();
  // An fp32 copy of a bf16 tensor; any other tensor (or an undefined one) as it is.
  Tensor In(const Tensor& t);
  // An fp32 tensor the kernel writes, rounded into `t` at the end of the scope. `read`: it starts
  // with t's values (outputs the kernel accumulates into).
  Tensor Out(const Tensor& t, bool read = false);

 private:
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (bf16 destination, fp32 scratch)
};

}  // namespace moe::kernels::cpu

// Calls BODY with T bound to the C++ type of a floating CPU tensor (f32 or f64).
#define MOE_CPU_FLOAT_DISPATCH(dtype, T, ...)                                               \
  do {                                                                                      \
    switch (dtype) {                                                                        \
      case ::moe::DType::kF32: {                                                            \
        using T = float;                                                                    \
        __VA_ARGS__;                                                                        \
        break;                                                                              \
      }                                                                                     \
      case ::moe::DType::kF64: {                                                            \
        using T = double;                                                                   \
        __VA_ARGS__;                                                                        \
        break;                                                                              \
      }                                                                                     \
      default:                                                                              \
        MOE_CHECK(false) << "CPU kernels take f32 or f64, got " << ::moe::DTypeName(dtype); \
    }                                                                                       \
  } while (0)
