// The reproducible built-in GEMM (training.deterministic on CPU): packing, cache blocking and the
// threads' shares around the register tiles of kernels/cpu/gemm_tile.h.
//
// Every element of C is one chain, c = fma(alpha a_ik, b_kj, c) for k in order from beta c (0 when
// beta is 0), whatever M, N, the element's place, the thread count or the ISA: blocking k stores
// and reloads a partial sum (exact), threads split C, never k. So a token's row of a product is the
// same bits in a batch of one or of thousands, which is what makes every layout train bitwise like
// W = 1.
//
// Goto's loop nest: op(A) and op(B) packed once per call into panels of MR rows and NR columns
// (alpha applied to A as it is packed: the chain's first factor is alpha a_ik however A comes),
// then per thread: columns in blocks of kBlockN, k in blocks of kBlockK, rows in blocks of
// kBlockM; a B micro-panel (kBlockK x NR) stays in L1 while the tiles of a row block pass over it,
// the row block (kBlockM x kBlockK) in L2.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/cpu/gemm_tile.h"
#include "kernels/cpu_gemm.h"
#include "kernels/kernel_state.h"
#include "kernels/tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace moe::kernels::cpu {

namespace {

using gemm::TileArgs;
using gemm::TileFn;
using gemm::TileKernels;

constexpr int64_t kBlockK = 256;
constexpr int64_t kBlockM = 96;   // rows (a multiple of every MR: 4, 6, 12)
constexpr int64_t kBlockN = 512;  // columns (a multiple of every NR: 4, 8, 16, 32)
constexpr int64_t kMaxTile = 16 * 64;
// Below this many multiply-adds a call runs on one thread (the team's start costs more).
constexpr int64_t kParallelWork = int64_t{1} << 21;

bool CpuHas(const char* feature) {
#if defined(__x86_64__) || defined(__i386__)
  if (std::strcmp(feature, "avx512") == 0) return __builtin_cpu_supports("avx512f");
  if (std::strcmp(feature, "avx2") == 0)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return std::strcmp(feature, "scalar") == 0;
}

// Every ISA's tiles, built once and never changed: a choice points at one of them, so changing
// it frees nothing a call in flight may still be reading.
const TileKernels* Table(const std::string& isa) {
  static const TileKernels avx512 = gemm::Avx512Tiles(), avx2 = gemm::Avx2Tiles(),
                           scalar = gemm::ScalarTiles();
  return isa == "avx512" ? &avx512 : isa == "avx2" ? &avx2 : &scalar;
}

// The tiles of `isa` when this build has them and this CPU runs them; else the scalar ones, with
// found = false.
const TileKernels* TilesFor(const std::string& isa, bool* found) {
  const TileKernels* k = Table(isa);
  *found = k->isa == isa && k->f32 != nullptr && CpuHas(k->isa);
  return *found ? k : Table("scalar");
}

// The widest tiles this CPU runs, or those MOE_CPU_GEMM_ISA names (avx512, avx2, scalar) where
// they run (benchmarks of the AVX2 path on an AVX-512 machine).
const TileKernels* Widest() {
  bool found = false;
  if (const char* env = std::getenv("MOE_CPU_GEMM_ISA"); env != nullptr && *env != 0) {
    const TileKernels* k = TilesFor(env, &found);
    if (found) return k;
  }
  for (const char* isa : {"avx512", "avx2"}) {
    const TileKernels* k = TilesFor(isa, &found);
    if (found) return k;
  }
  return Table("scalar");
}

std::atomic<const TileKernels*>& Chosen() {
  static std::atomic<const TileKernels*> chosen{Widest()};
  return chosen;
}

// An uninitialised CPU tensor of n values of T from the caching allocator (kernels/tensor.h): the
// packed operands come back warm (a fresh 4 MB block page-faults at every call, which cost as much
// as the arithmetic on this virtual machine) and count in the memory statistics.
template <typename T>
Tensor Scratch(int64_t n) {
  return Tensor::Empty({std::max<int64_t>(n, 1)},
                       std::is_same_v<T, float> ? DType::kF32 : DType::kF64);
}

// One call's operands and its packed panels.
template <typename T>
struct Call {
  bool ta, tb;
  int64_t m, n, k;
  T alpha;
  const T* a;
  int64_t lda;
  const T* b;
  int64_t ldb;
  T beta;
  T* c;
  int64_t ldc;
  double* acc;  // accumulate mode: acc += op(A) op(B) (beta 0), C unused
  int64_t ldacc;
  // The tiles and the packed operands.
  TileFn<T> tile;
  int64_t mr, nr, mp, np;  // tile shape; panels of rows and of columns
  T* ap;                   // mp panels of [k][mr]
  T* bp;                   // np panels of [k][nr]
  T* partial;              // accumulate mode over several k blocks: per thread, [rows][kBlockN]
  int64_t partial_each;    // values of `partial` per thread
};

template <typename T>
void PackA(const Call<T>& c, int64_t panel) {
  T* out = c.ap + panel * c.k * c.mr;
  const int64_t i0 = panel * c.mr, rows = std::min(c.mr, c.m - i0);
  for (int64_t p = 0; p < c.k; ++p, out += c.mr) {
    for (int64_t r = 0; r < rows; ++r)
      out[r] = c.alpha * (c.ta ? c.a[p * c.lda + i0 + r] : c.a[(i0 + r) * c.lda + p]);
    for (int64_t r = rows; r < c.mr; ++r) out[r] = T(0);
  }
}

template <typename T>
void PackB(const Call<T>& c, int64_t panel) {
  T* out = c.bp + panel * c.k * c.nr;
  const int64_t j0 = panel * c.nr, cols = std::min(c.nr, c.n - j0);
  for (int64_t p = 0; p < c.k; ++p, out += c.nr) {
    if (!c.tb && cols == c.nr) {
      std::memcpy(out, c.b + p * c.ldb + j0, sizeof(T) * static_cast<size_t>(c.nr));
      continue;
    }
    for (int64_t q = 0; q < cols; ++q)
      out[q] = c.tb ? c.b[(j0 + q) * c.ldb + p] : c.b[p * c.ldb + j0 + q];
    for (int64_t q = cols; q < c.nr; ++q) out[q] = T(0);
  }
}

// A thread's share of C: row panels [r0, r1) x column panels [c0, c1); `partial` holds the
// partial sums of accumulate mode when k spans more than one block ([rows][kBlockN]).
struct Share {
  int64_t r0, r1, c0, c1;
};

// One tile over k block [pc, pc + kc): full tiles in place, edge tiles through a full-size copy.
template <typename T>
void RunTile(const Call<T>& c, int64_t ir, int64_t jr, int64_t pc, int64_t kc, T* partial,
             int64_t ldp) {
  const int64_t i0 = ir * c.mr, j0 = jr * c.nr;
  const int64_t rows = std::min(c.mr, c.m - i0), cols = std::min(c.nr, c.n - j0);
  const bool first = pc == 0, last = pc + kc >= c.k, full = rows == c.mr && cols == c.nr;
  alignas(64) T edge[kMaxTile];
  TileArgs<T> t;
  t.kc = kc;
  t.a = c.ap + ir * c.k * c.mr + pc * c.mr;
  t.b = c.bp + jr * c.k * c.nr + pc * c.nr;
  t.beta = c.beta;
  t.first = first;
  if (c.acc != nullptr) {  // partial sums in `partial` (a full tile, edges included) or `edge`
    t.c = partial != nullptr ? partial : edge;
    t.ldc = partial != nullptr ? ldp : c.nr;
    double* acc = c.acc + i0 * c.ldacc + j0;
    if (last && full) {
      t.acc = acc;
      t.ldacc = c.ldacc;
    }
    c.tile(t);
    if (!last || full) return;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t q = 0; q < cols; ++q)
        acc[r * c.ldacc + q] += static_cast<double>(t.c[r * t.ldc + q]);
    return;
  }
  T* out = c.c + i0 * c.ldc + j0;
  if (full) {
    t.c = out;
    t.ldc = c.ldc;
    return c.tile(t);
  }
  t.c = edge;
  t.ldc = c.nr;
  if (!first || c.beta != T(0)) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(edge + r * c.nr, out + r * c.ldc, sizeof(T) * static_cast<size_t>(cols));
  }
  c.tile(t);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * c.ldc, edge + r * c.nr, sizeof(T) * static_cast<size_t>(cols));
}

template <typename T>
void Compute(const Call<T>& c, const Share& s, int t) {
  const int64_t mcp = kBlockM / c.mr, ncp = kBlockN / c.nr;
  // Accumulate mode over several k blocks: the share's partial sums, one column block at a time.
  const int64_t ldp = ncp * c.nr;
  T* partial = c.partial != nullptr ? c.partial + t * c.partial_each : nullptr;
  for (int64_t jc = s.c0; jc < s.c1; jc += ncp) {
    const int64_t jc1 = std::min(jc + ncp, s.c1);
    for (int64_t pc = 0; pc < c.k; pc += kBlockK) {
      const int64_t kc = std::min(kBlockK, c.k - pc);
      for (int64_t ic = s.r0; ic < s.r1; ic += mcp) {
        const int64_t ic1 = std::min(ic + mcp, s.r1);
        for (int64_t jr = jc; jr < jc1; ++jr) {
          for (int64_t ir = ic; ir < ic1; ++ir) {
            T* p = partial ? partial + (ir - s.r0) * c.mr * ldp + (jr - jc) * c.nr : nullptr;
            RunTile(c, ir, jr, pc, kc, p, ldp);
          }
        }
      }
    }
  }
}

// Thread t of `threads`: its share of the panels along the longer side.
Share ShareOf(int64_t mp, int64_t np, int t, int threads) {
  if (mp >= np) return Share{mp * t / threads, mp * (t + 1) / threads, 0, np};
  return Share{0, mp, np * t / threads, np * (t + 1) / threads};
}

template <typename T>
void Run(Call<T>& c) {
  const TileKernels& tiles = *Chosen().load();
  if constexpr (std::is_same_v<T, float>) {
    c.tile = tiles.f32;
    c.mr = tiles.mr_f32;
    c.nr = tiles.nr_f32;
  } else {
    c.tile = tiles.f64;
    c.mr = tiles.mr_f64;
    c.nr = tiles.nr_f64;
  }
  c.mp = (c.m + c.mr - 1) / c.mr;
  c.np = (c.n + c.nr - 1) / c.nr;
  int threads = 1;
#ifdef _OPENMP
  if (c.m * c.n * c.k >= kParallelWork && !omp_in_parallel())
    threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), std::max(c.mp, c.np)));
#endif
  const Tensor ap = Scratch<T>(c.mp * c.mr * c.k), bp = Scratch<T>(c.np * c.nr * c.k);
  c.ap = ap.data<T>();
  c.bp = bp.data<T>();
  Tensor partial;
  if (c.acc != nullptr && c.k > kBlockK) {
    const int64_t rows = c.mp >= c.np ? (c.mp + threads - 1) / threads : c.mp;  // a share's most
    c.partial_each = rows * c.mr * kBlockN;
    partial = Scratch<T>(c.partial_each * threads);
    c.partial = partial.data<T>();
  }
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      for (int64_t i = c.mp * t / nt; i < c.mp * (t + 1) / nt; ++i) PackA(c, i);
      for (int64_t j = c.np * t / nt; j < c.np * (t + 1) / nt; ++j) PackB(c, j);
#pragma omp barrier
      for (int u = t; u < threads; u += nt) Compute(c, ShareOf(c.mp, c.np, u, threads), u);
    }
    return;
  }
#endif
  for (int64_t i = 0; i < c.mp; ++i) PackA(c, i);
  for (int64_t j = 0; j < c.np; ++j) PackB(c, j);
  Compute(c, ShareOf(c.mp, c.np, 0, 1), 0);
}

// C = beta C when there is nothing to sum over.
template <typename T>
void ScaleOnly(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}

}  // namespace

template <typename T>
void BlockedGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                 int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleOnly(m, n, beta, c, ldc);
  Call<T> call{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nullptr, 0};
  call.partial = nullptr;
  Run(call);
}

template <typename T>
void BlockedGemmAccumulate(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                           int64_t lda, const T* b, int64_t ldb, double* acc, int64_t ldacc) {
  if (m == 0 || n == 0 || k == 0) return;
  Call<T> call{trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, T(0), nullptr, 0, acc, ldacc};
  call.partial = nullptr;
  Run(call);
}

std::string BlockedGemmIsa() { return Chosen().load()->isa; }

bool SetBlockedGemmIsa(const std::string& isa) {
  bool found = false;
  const TileKernels* k = isa.empty() ? Widest() : TilesFor(isa, &found);
  if (!isa.empty() && !found) return false;
  Chosen().store(k);
  return true;
}

template void BlockedGemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                 int64_t, const float*, int64_t, float, float*, int64_t);
template void BlockedGemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                  int64_t, const double*, int64_t, double, double*, int64_t);
template void BlockedGemmAccumulate<float>(bool, bool, int64_t, int64_t, int64_t, const float*,
                                           int64_t, const float*, int64_t, double*, int64_t);
template void BlockedGemmAccumulate<double>(bool, bool, int64_t, int64_t, int64_t, const double*,
                                            int64_t, const double*, int64_t, double*, int64_t);

}  // namespace moe::kernels::cpu
