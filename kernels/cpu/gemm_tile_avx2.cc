// The reproducible GEMM's tiles for AVX2 with FMA (kernels/cpu/gemm_tile.h); this file alone is
// compiled with -mavx2 -mfma (kernels/CMakeLists.txt), and the driver calls it only where the CPU
// has both.
#include <cstdint>

#include "kernels/cpu/gemm_tile.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace {
#include "kernels/cpu/gemm_tile_impl.h"

struct F32x8 {
  using T = float;
  using Vec = __m256;
  static constexpr int kWidth = 8;
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec Set1(float x) { return _mm256_set1_ps(x); }
  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void AddToF64(double* dst, Vec v) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_pd(dst, _mm256_add_pd(_mm256_loadu_pd(dst), lo));
    _mm256_storeu_pd(dst + 4, _mm256_add_pd(_mm256_loadu_pd(dst + 4), hi));
  }
};

struct F64x4 {
  using T = double;
  using Vec = __m256d;
  static constexpr int kWidth = 4;
  static Vec Load(const double* p) { return _mm256_loadu_pd(p); }
  static void Store(double* p, Vec v) { _mm256_storeu_pd(p, v); }
  static Vec Set1(double x) { return _mm256_set1_pd(x); }
  static Vec Zero() { return _mm256_setzero_pd(); }
  static Vec Mul(Vec a, Vec b) { return _mm256_mul_pd(a, b); }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_pd(a, b, c); }
  static void AddToF64(double* dst, Vec v) {
    _mm256_storeu_pd(dst, _mm256_add_pd(_mm256_loadu_pd(dst), v));
  }
};

}  // namespace

namespace moe::kernels::cpu::gemm {

// 6 rows x 2 vectors: 12 of the 16 ymm registers accumulate (the FMA latency covered twice over).
TileKernels Avx2Tiles() {
  TileKernels k;
  k.isa = "avx2";
  k.mr_f32 = 6;
  k.nr_f32 = 16;
  k.f32 = &Tile<F32x8, 6, 2>;
  k.mr_f64 = 6;
  k.nr_f64 = 8;
  k.f64 = &Tile<F64x4, 6, 2>;
  return k;
}

}  // namespace moe::kernels::cpu::gemm

#else

namespace moe::kernels::cpu::gemm {
TileKernels Avx2Tiles() {
  TileKernels k;
  k.isa = "avx2";
  return k;
}
}  // namespace moe::kernels::cpu::gemm

#endif
