// The reproducible GEMM's tiles for AVX-512 (kernels/cpu/gemm_tile.h); this file alone is compiled
// with -mavx512f (kernels/CMakeLists.txt), and the driver calls it only where the CPU has AVX-512F.
#include <cstdint>

#include "kernels/cpu/gemm_tile.h"

#if defined(__AVX512F__)
#include <immintrin.h>

namespace {
#include "kernels/cpu/gemm_tile_impl.h"

struct F32x16 {
  using T = float;
  using Vec = __m512;
  static constexpr int kWidth = 16;
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm512_set1_ps(x); }
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static void AddToF64(double* dst, Vec v) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    _mm512_storeu_pd(dst, _mm512_add_pd(_mm512_loadu_pd(dst), lo));
    _mm512_storeu_pd(dst + 8, _mm512_add_pd(_mm512_loadu_pd(dst + 8), hi));
  }
};

struct F64x8 {
  using T = double;
  using Vec = __m512d;
  static constexpr int kWidth = 8;
  static Vec Load(const double* p) { return _mm512_loadu_pd(p); }
  static void Store(double* p, Vec v) { _mm512_storeu_pd(p, v); }
  static Vec Set1(double x) { return _mm512_set1_pd(x); }
  static Vec Zero() { return _mm512_setzero_pd(); }
  static Vec Mul(Vec a, Vec b) { return _mm512_mul_pd(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_pd(a, b, c); }
  static void AddToF64(double* dst, Vec v) {
    _mm512_storeu_pd(dst, _mm512_add_pd(_mm512_loadu_pd(dst), v));
  }
};

}  // namespace

namespace moe::kernels::cpu::gemm {

// 12 rows x 2 vectors: 24 of the 32 zmm registers accumulate, two hold B's row, one A's broadcast.
TileKernels Avx512Tiles() {
  TileKernels k;
  k.isa = "avx512";
  k.mr_f32 = 12;
  k.nr_f32 = 32;
  k.f32 = &Tile<F32x16, 12, 2>;
  k.mr_f64 = 12;
  k.nr_f64 = 16;
  k.f64 = &Tile<F64x8, 12, 2>;
  return k;
}

}  // namespace moe::kernels::cpu::gemm

#else

namespace moe::kernels::cpu::gemm {
TileKernels Avx512Tiles() {
  TileKernels k;
  k.isa = "avx512";
  return k;
}
}  // namespace moe::kernels::cpu::gemm

#endif
