// The CPU GEMMs: the raw-pointer row-major GEMM (OpenBLAS where linked, else a blocked GEMM of our own)
// and the Tensor-level Gemm and grouped GEMMs over experts built on it.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gemm.h"
#ifdef MOE_HAVE_CBLAS
#include <cblas.h>
#endif

namespace moe::kernels::cpu {

template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Bring op(B) to a contiguous [K, N] so the inner loop runs along contiguous rows of B and C, and
  // op(A) to [M, K]. The copies cost O(MK + KN) against the O(MNK) product.
  std::vector<T> bt;
  const T* bp = b;
  int64_t ldbp = ldb;
  if (trans_b) {
    bt.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) bt[static_cast<size_t>(p * n + j)] = b[j * ldb + p];
    bp = bt.data();
    ldbp = n;
  }
  std::vector<T> at;
  const T* ap = a;
  int64_t ldap = lda;
  if (trans_a) {
    at.resize(static_cast<size_t>(m * k));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < m; ++i) at[static_cast<size_t>(i * k + p)] = a[p * lda + i];
    ap = at.data();
    ldap = k;
  }
  // Blocks of op(B) (kBlockK x kBlockN, about 128 KiB of floats) stay in cache while every row of this
  // thread's share of C accumulates against them; the innermost loop runs along contiguous rows of B
  // and C and vectorises.
  constexpr int64_t kBlockN = 256, kBlockK = 128;
  ParallelFor(m, n * k, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T* crow = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) crow[j] = beta == T(0) ? T(0) : beta * crow[j];
    }
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t jn = std::min(kBlockN, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
        const int64_t pn = std::min(kBlockK, k - p0);
        for (int64_t i = i0; i < i1; ++i) {
          T* crow = c + i * ldc + j0;
          const T* arow = ap + i * ldap;
          for (int64_t p = p0; p < p0 + pn; ++p) {
            const T av = alpha * arow[p];
            const T* brow = bp + p * ldbp + j0;
            for (int64_t j = 0; j < jn; ++j) crow[j] += av * brow[j];
          }
        }
      }
    }
  });
}

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
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
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }
#else
  BlockedGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
}

template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);
template void BlockedGemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                 int64_t, float, float*, int64_t);
template void BlockedGemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                  const double*, int64_t, double, double*, int64_t);

void Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta) {
  if (HasBf16({&a, &b, &c})) {
    Bf16Scope s;
    Gemm(s.In(a), trans_a, s.In(b), trans_b, s.Out(c, beta != 0.0), alpha, beta);
    return;
  }
  MOE_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype()) << "Gemm dtypes differ";
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  MOE_CPU_FLOAT_DISPATCH(c.dtype(), T,
                         Gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(),
                                 b.dim(1), static_cast<T>(beta), c.data<T>(), c.dim(1)));
}

void GroupedGemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& y) {
  if (HasBf16({&x, &w, &y})) {
    Bf16Scope s;
    GroupedGemm(s.In(x), s.In(w), offsets, s.Out(y));
    return;
  }
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  MOE_CPU_FLOAT_DISPATCH(y.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)], rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(false, true, rows, n, k, T(1), x.data<T>() + r0 * k, k, w.data<T>() + g * n * k, k, T(0), y.data<T>() + r0 * n, n);
    }
  });
}

void GroupedGemmBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& offsets, const Tensor& dx) {
  if (HasBf16({&dy, &w, &dx})) {
    Bf16Scope s;
    GroupedGemmBackwardData(s.In(dy), s.In(w), offsets, s.Out(dx));
    return;
  }
  const int64_t groups = w.dim(0), n = w.dim(1), k = w.dim(2);
  MOE_CPU_FLOAT_DISPATCH(dx.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)], rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(false, false, rows, k, n, T(1), dy.data<T>() + r0 * n, n, w.data<T>() + g * n * k, k, T(0),
              dx.data<T>() + r0 * k, k);
    }
  });
}

void GroupedGemmBackwardWeight(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& dw) {
  if (HasBf16({&dy, &x, &dw})) {
    Bf16Scope s;
    GroupedGemmBackwardWeight(s.In(dy), s.In(x), offsets, s.Out(dw, true));
    return;
  }
  const int64_t groups = dw.dim(0), n = dw.dim(1), k = dw.dim(2);
  MOE_CPU_FLOAT_DISPATCH(dw.dtype(), T, {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t r0 = offsets[static_cast<size_t>(g)], rows = offsets[static_cast<size_t>(g) + 1] - r0;
      if (rows == 0) continue;
      Gemm<T>(true, false, n, k, rows, T(1), dy.data<T>() + r0 * n, n, x.data<T>() + r0 * k, k, T(1), dw.data<T>() + g * n * k,
              k);
    }
  });
}

}  // namespace moe::kernels::cpu
