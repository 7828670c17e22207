// The reproducible GEMM's tiles in plain C++ (kernels/cpu/gemm_tile.h): any CPU, and the one the
// others are compared with bitwise (tests/kernels/gemm_test.cc). __builtin_fma rounds once, as the
// vector FMAs do.
#include <cstdint>

#include "kernels/cpu/gemm_tile.h"

namespace {
#include "kernels/cpu/gemm_tile_impl.h"

template <typename T_>
struct One {
  using T = T_;
  using Vec = T_;
  static constexpr int kWidth = 1;
  static Vec Load(const T* p) { return *p; }
  static void Store(T* p, Vec v) { *p = v; }
  static Vec Set1(T x) { return x; }
  static Vec Zero() { return T(0); }
  static Vec Mul(Vec a, Vec b) { return a * b; }
  static Vec Fma(Vec a, Vec b, Vec c) { return __builtin_fma(a, b, c); }
  static void AddToF64(double* dst, Vec v) { *dst += static_cast<double>(v); }
};

template <>
inline float One<float>::Fma(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);
}

}  // namespace

namespace moe::kernels::cpu::gemm {

TileKernels ScalarTiles() {
  TileKernels k;
  k.isa = "scalar";
  k.mr_f32 = k.mr_f64 = 4;
  k.nr_f32 = k.nr_f64 = 4;
  k.f32 = &Tile<One<float>, 4, 4>;
  k.f64 = &Tile<One<double>, 4, 4>;
  return k;
}

}  // namespace moe::kernels::cpu::gemm
