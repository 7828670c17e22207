// The register tile of the reproducible GEMM, written once over a vector type (kernels/cpu/
// gemm_tile.h says what a call computes). Each ISA's file includes this inside its own anonymous
// namespace, so every copy is private to the file compiled for its ISA; the includer has included
// <cstdint> and kernels/cpu/gemm_tile.h before it. No standard library here (see gemm_tile.h).
//
// A vector type V provides: T (float or double), Vec, kWidth, Load, Store, Set1, Zero, Mul, Fma,
// and AddToF64(double* dst, Vec v): dst[0, kWidth) += v in f64.
#pragma once

// R rows x C vectors of columns: R * C accumulators stay in registers over the call's kc steps.
template <class V, int R, int C>
void Tile(const ::moe::kernels::cpu::gemm::TileArgs<typename V::T>& t) {
  using T = typename V::T;
  using Vec = typename V::Vec;
  constexpr int w = V::kWidth, nr = C * w;
  Vec acc[R][C];
  if (!t.first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int q = 0; q < C; ++q) acc[r][q] = V::Load(t.c + r * t.ldc + q * w);
  } else if (t.beta == T(0)) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int q = 0; q < C; ++q) acc[r][q] = V::Zero();
  } else {
    const Vec beta = V::Set1(t.beta);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int q = 0; q < C; ++q) acc[r][q] = V::Mul(beta, V::Load(t.c + r * t.ldc + q * w));
  }
  const T* a = t.a;
  const T* b = t.b;
  for (int64_t p = 0; p < t.kc; ++p, a += R, b += nr) {
    Vec bv[C];
#pragma GCC unroll 4
    for (int q = 0; q < C; ++q) bv[q] = V::Load(b + q * w);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec av = V::Set1(a[r]);
#pragma GCC unroll 4
      for (int q = 0; q < C; ++q) acc[r][q] = V::Fma(av, bv[q], acc[r][q]);
    }
  }
  if (t.acc != nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int q = 0; q < C; ++q) V::AddToF64(t.acc + r * t.ldacc + q * w, acc[r][q]);
    return;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int q = 0; q < C; ++q) V::Store(t.c + r * t.ldc + q * w, acc[r][q]);
}
