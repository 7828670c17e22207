// The CPU GEMMs: the raw-pointer row-major GEMM (OpenBLAS where linked, else a blocked GEMM of our
// own) and the Tensor-level Gemm and grouped GEMMs over experts built on it.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"
#ifdef MOE_HAVE_CBLAS
#include <cblas.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace moe::kernels::cpu {

namespace {

// Vectors of the built-in GEMM: AVX2 with explicit FMA where the build targets it, else one value.
// Every element of C is computed by the same chain whatever path takes it, c = fma(alpha a_ik,
// b_kj, c) for k in order starting from beta c, because a vector FMA rounds each lane as std::fma
// does.
template <typename T>
struct Scalar {
  using V = T;
  static constexpr int kWidth = 1;
  static V Load(const T* p) { return *p; }
  static void Store(T* p, V v) { *p = v; }
  static V Set1(T x) { return x; }
  static V Mul(V a, V b) { return a * b; }
  static V Fma(V a, V b, V c) { return std::fma(a, b, c); }
};
template <typename T>
struct Simd : Scalar<T> {};
#if defined(__AVX2__) && defined(__FMA__)
template <>
struct Simd<float> {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
template <>
struct Simd<double> {
  using V = __m256d;
  static constexpr int kWidth = 4;
  static V Load(const double* p) { return _mm256_loadu_pd(p); }
  static void Store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V Set1(double x) { return _mm256_set1_pd(x); }
  static V Mul(V a, V b) { return _mm256_mul_pd(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
};
#endif

// Rows [0, R) x C vectors of columns of C (at c) over k in [p0, p1), with S's vectors (S = Simd<T>
// or Scalar<T> for the last columns). first: start from beta c (0 when beta is 0).
template <typename T, typename S, int R, int C>
void Tile(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t p0,
          int64_t p1, T beta, bool first) {
  constexpr int w = S::kWidth;
  typename S::V acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < C; ++q) {
      T* at = c + r * ldc + q * w;
      acc[r][q] = !first ? S::Load(at)
                         : (beta == T(0) ? S::Set1(T(0)) : S::Mul(S::Set1(beta), S::Load(at)));
    }
  }
  for (int64_t p = p0; p < p1; ++p) {
    typename S::V bv[C];
    for (int q = 0; q < C; ++q) bv[q] = S::Load(b + p * ldb + q * w);
    for (int r = 0; r < R; ++r) {
      const typename S::V av = S::Set1(a[r * lda + p]);
      for (int q = 0; q < C; ++q) acc[r][q] = S::Fma(av, bv[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < C; ++q) S::Store(c + r * ldc + q * w, acc[r][q]);
  }
}

// op(B) [K, N] packed for the tiles: full panels of two vectors' columns, each [K, 2w] contiguous
// (one stream per tile, no cache-set conflicts at power-of-two strides), then the last columns as
// [K, rest].
template <typename T>
struct PackedB {
  static constexpr int64_t kPanel = 2 * Simd<T>::kWidth;
  std::vector<T> data;
  int64_t k = 0, full = 0, rest = 0, stride = 0;

  // Panels lie (K + 1) x 2w apart: at power-of-two K they would otherwise share their L2 sets.
  PackedB(bool trans, const T* b, int64_t ldb, int64_t k_, int64_t n)
      : k(k_), full(n / kPanel * kPanel), rest(n - full), stride((k + 1) * kPanel) {
    data.resize(static_cast<size_t>(full / kPanel * stride + k * rest));
    auto at = [&](int64_t p, int64_t j) { return trans ? b[j * ldb + p] : b[p * ldb + j]; };
    for (int64_t j0 = 0; j0 < full; j0 += kPanel) {
      T* out = data.data() + j0 / kPanel * stride;
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = j0; j < j0 + kPanel; ++j) *out++ = at(p, j);
    }
    T* out = data.data() + full / kPanel * stride;
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = full; j < full + rest; ++j) *out++ = at(p, j);
  }
  const T* panel(int64_t j0) const { return data.data() + j0 / kPanel * stride; }
  const T* tail() const { return data.data() + full / kPanel * stride; }
};

// What one pass of a thread covers: k in [p0, p1), the panels' columns [j0, j1), and the last
// columns (the edge) when `edge`.
struct Block {
  int64_t p0, p1, j0, j1;
  bool edge;
};

// Up to 6 rows of C over a block: tiles of R rows x 2 vectors, then narrower ones at the edge.
template <typename T, int R>
void RowBlock(const T* a, int64_t lda, const PackedB<T>& b, T* c, int64_t ldc, const Block& k,
              T beta) {
  using S = Simd<T>;
  constexpr int64_t w = S::kWidth, panel = PackedB<T>::kPanel;
  const int64_t p0 = k.p0, p1 = k.p1;
  const bool first = p0 == 0;
  for (int64_t j = k.j0; j < k.j1; j += panel)
    Tile<T, S, R, 2>(a, lda, b.panel(j), panel, c + j, ldc, p0, p1, beta, first);
  if (!k.edge) return;
  int64_t j = 0;
  for (; j + w <= b.rest; j += w)
    Tile<T, S, R, 1>(a, lda, b.tail() + j, b.rest, c + b.full + j, ldc, p0, p1, beta, first);
  for (; j < b.rest; ++j)
    Tile<T, Scalar<T>, R, 1>(a, lda, b.tail() + j, b.rest, c + b.full + j, ldc, p0, p1, beta,
                             first);
}

template <typename T>
void Rows(const T* a, int64_t lda, const PackedB<T>& b, T* c, int64_t ldc, int64_t rows,
          const Block& k, T beta) {
  switch (rows) {
    case 6:
      return RowBlock<T, 6>(a, lda, b, c, ldc, k, beta);
    case 5:
      return RowBlock<T, 5>(a, lda, b, c, ldc, k, beta);
    case 4:
      return RowBlock<T, 4>(a, lda, b, c, ldc, k, beta);
    case 3:
      return RowBlock<T, 3>(a, lda, b, c, ldc, k, beta);
    case 2:
      return RowBlock<T, 2>(a, lda, b, c, ldc, k, beta);
    default:
      return RowBlock<T, 1>(a, lda, b, c, ldc, k, beta);
  }
}

}  // namespace

// The built-in GEMM, reproducible: each element of C is the chain c = fma(alpha a_ik, b_kj, c) over
// k in order from beta c, so it does not depend on M, N, the element's position or the thread count
// (OpenBLAS's results depend on all of them). Register tiles of 6 rows x 2 vectors; K in blocks of
// 256 (storing and reloading a partial sum is exact, so blocking leaves the chain as it is).
template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Packed operands: O(MK + KN) copies against the O(MNK) product. op(A) is scaled by alpha as it
  // is copied (the chain's first factor is alpha a_ik however A comes).
  const PackedB<T> bp(trans_b, b, ldb, k, n);
  // Rows of the packed A are 16 values longer than K: at power-of-two K a tile's six rows would
  // otherwise fall into one L1 set.
  const int64_t ldap = k + 16;
  std::vector<T> at(static_cast<size_t>(m * ldap));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      at[static_cast<size_t>(i * ldap + p)] = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
  const T* ap = at.data();
  // 6 rows x 2 vectors: 12 accumulators cover the FMA latency. Blocks of 256 k x 128 columns of
  // op(B) (128 KB of floats) stay in L2 while the thread's rows pass over them.
  constexpr int64_t kRows = 6, kBlockK = 256, kBlockN = 128;
  ParallelFor((m + kRows - 1) / kRows, kRows * n * k, [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * kRows, i1 = std::min(b1 * kRows, m);
    for (int64_t p0 = 0; p0 < std::max<int64_t>(k, 1); p0 += kBlockK) {
      for (int64_t j0 = 0; j0 < std::max<int64_t>(bp.full, 1); j0 += kBlockN) {
        const Block blk{p0, std::min(p0 + kBlockK, k), std::min(j0, bp.full),
                        std::min(j0 + kBlockN, bp.full), j0 + kBlockN >= bp.full};
        for (int64_t i = i0; i < i1; i += kRows)
          Rows(ap + i * ldap, ldap, bp, c + i * ldc, ldc, std::min(kRows, i1 - i), blk, beta);
      }
    }
  });
}

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
template void BlockedGemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
template void BlockedGemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
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
