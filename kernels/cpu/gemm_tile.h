// The reproducible GEMM's register tiles (kernels/cpu/gemm_blocked.cc drives them): one call runs
// one MR x NR tile of C over kc steps of k from packed operands. Each ISA's tiles live in their own
// file compiled for that ISA (gemm_tile_avx512.cc, gemm_tile_avx2.cc); the driver picks one at run
// time. This header and the tile files include no standard library header but <cstdint> (types
// only): an inline function of
// the standard library compiled for AVX-512 in one of them could be the copy the linker keeps for
// the whole program, and fault on a CPU without AVX-512.
//
// Every element of C is the same chain whatever the ISA, the tile's place or the thread: from
// beta c (0 when beta is 0), c = fma(a'_ik, b_kj, c) for k in order, with a' = alpha a rounded
// (a vector FMA rounds each lane as std::fma does, so AVX-512, AVX2 and scalar agree bitwise).
#pragma once

#include <cstdint>

namespace moe::kernels::cpu::gemm {

template <typename T>
struct TileArgs {
  int64_t kc = 0;        // k steps in this call
  const T* a = nullptr;  // packed op(A) * alpha: [kc][MR], rows past M zero
  const T* b = nullptr;  // packed op(B): [kc][NR], columns past N zero
  T* c = nullptr;        // the tile's partial sums, row-major with stride ldc (MR x NR of them)
  int64_t ldc = 0;
  T beta = 0;          // first: start from beta c, or from 0 when beta is 0 (c not read)
  bool first = false;  // the first k block of the tile; else start from c
  // Not null on the tile's last k block: acc[i ldacc + j] += c_ij in f64 instead of storing c
  // (the f64 gradient accumulators of deterministic training).
  double* acc = nullptr;
  int64_t ldacc = 0;
};

template <typename T>
using TileFn = void (*)(const TileArgs<T>&);

// One ISA's tiles: MR rows x NR columns, and the functions (null when the ISA is not compiled in).
struct TileKernels {
  const char* isa = "scalar";
  int mr_f32 = 0, nr_f32 = 0, mr_f64 = 0, nr_f64 = 0;
  TileFn<float> f32 = nullptr;
  TileFn<double> f64 = nullptr;
};

TileKernels Avx512Tiles();  // gemm_tile_avx512.cc (isa "avx512"; null functions off x86-64)
TileKernels Avx2Tiles();    // gemm_tile_avx2.cc (isa "avx2")
TileKernels ScalarTiles();  // gemm_tile_scalar.cc (any CPU)

}  // namespace moe::kernels::cpu::gemm
