// The CPU GEMMs: the raw-pointer row-major GEMM (OpenBLAS where linked, else a blocked GEMM of our
// own) and the Tensor-level Gemm and grouped GEMMs over experts built on it.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu_gemm.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"
#ifdef MOE_HAVE_CBLAS
#include <cblas.h>
#endif

namespace moe::kernels::cpu {

template <typename T>
void FastestGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
#ifdef MOE_HAVE_CBLAS
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(ldc));
  }
#else
  BlockedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (ReproducibleCpuGemm())
    return BlockedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  FastestGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void FastestGemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
template void FastestGemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                  int64_t, const double*, int64_t, double, double*, int64_t);
void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
          double alpha, double beta) {
  if (HasBf16({&a, &b, &c})) {
    Bf16Scope s;
    Gemm(s.In(a), trans_a, s.In(b), trans_b, s.Out(c, beta != 0.0), alpha, beta);
    return;
  }
  MOE_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype()) << "Gemm dtypes differ";
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  MOE_CPU_FLOAT_DISPATCH(
      c.dtype(), T,
      Gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(),
              b.dim(1), static_cast<T>(beta), c.data<T>(), c.dim(1)));
}

void GemmAccumulate(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                    const Tensor& acc) {
  if (HasBf16({&a, &b})) {
    Bf16Scope s;
    GemmAccumulate(s.In(a), trans_a, s.In(b), trans_b, acc);
    return;
  }
  const int64_t m = acc.dim(0), n = acc.dim(1), k = trans_a ? a.dim(0) : a.dim(1);
  if (!ReproducibleCpuGemm()) {  // OpenBLAS's product, then its f64 sum
    MOE_CPU_FLOAT_DISPATCH(a.dtype(), T, {
      std::vector<T> product(static_cast<size_t>(m * n));
      FastestGemm<T>(trans_a, trans_b, m, n, k, T(1), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
                     T(0), product.data(), n);
      double* out = acc.data<double>();
      for (size_t i = 0; i < product.size(); ++i) out[i] += static_cast<double>(product[i]);
    });
    return;
  }
  MOE_CPU_FLOAT_DISPATCH(a.dtype(), T,
                         BlockedGemmAccumulate<T>(trans_a, trans_b, m, n, k, a.data<T>(), a.dim(1),
                                                  b.data<T>(), b.dim(1), acc.data<double>(), n));
}

void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets,
                 const Tensor& y) {
  if (HasBf16({&x, &w, &y})) {
    Bf16Scope s;
    GroupedGemm(s.In(x), s.In(w), offsets, s.Out(y));
    return;
  }
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  MOE_CPU_FLOAT_DISPATCH(y.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)],
                    rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(false, true, rows, n, k, T(1), x.data<T>() + r0 * k, k, w.data<T>() + g * n * k, k,
              T(0), y.data<T>() + r0 * n, n);
    }
  });
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets,
                             const Tensor& dx) {
  if (HasBf16({&dy, &w, &dx})) {
    Bf16Scope s;
    GroupedGemmBackwardData(s.In(dy), s.In(w), offsets, s.Out(dx));
    return;
  }
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  MOE_CPU_FLOAT_DISPATCH(dx.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)],
                    rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(false, false, rows, k, n, T(1), dy.data<T>() + r0 * n, n, w.data<T>() + g * n * k, k,
              T(0), dx.data<T>() + r0 * k, k);
    }
  });
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x,
                               const std::vector<int64_t>& offsets, const Tensor& dw) {
  if (HasBf16({&dy, &x, &dw})) {
    Bf16Scope s;
    GroupedGemmBackwardWeight(s.In(dy), s.In(x), offsets, s.Out(dw, true));
    return;
  }
  const int64_t groups = dw.dim(0), n = dw.dim(1), k = dw.dim(2);
  MOE_CPU_FLOAT_DISPATCH(dw.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)],
                    rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(true, false, n, k, rows, T(1), dy.data<T>() + r0 * n, n, x.data<T>() + r0 * k, k,
              T(1), dw.data<T>() + g * n * k, k);
    }
  });
}

}  // namespace moe::kernels::cpu
