// The tiled causal attention kernels (FlashAttention-2's algorithm) behind
// kernels/cuda/attention.cu, on the tensor cores through mma.cuh (bf16, or fp32 as 3xTF32). Per
// (sequence, head):
//   forward   one block per query tile, warps of 16 query rows (bf16: 8 warps, 128 rows; fp32: 4
//             warps, 64 rows); key tiles of 64 stream through shared memory (cp.async: the next K
//             tile loads during the softmax and P V, V during Q K^T); online softmax in registers;
//             P becomes the A operand of P V in registers (bf16) or through a per-warp shared tile
//             (fp32); out and the row log-sum-exp (lse) written at the end.
//   backward  deterministic, no atomics: D = rowsum(dout * out) first (one warp per row); then one
//             block per key tile owns dK and dV (it walks the query tiles at or below the diagonal,
//             recomputing P from lse), and one block per query tile owns dQ (it walks the key tiles
//             again). Each pass computes its score-shaped tiles (S, dP) with one warp layout, puts
//             P and dS in shared memory, and accumulates its outputs with another, so no warp holds
//             more than half of an output row.
// Tiles above the diagonal are never visited; only tiles that cross it (or the end of the sequence)
// are masked. Head sizes run in four compiled shapes, (d_qk, d_v) padded with zero columns to
// (64, 64), (128, 128), (192, 128) or (256, 256); sizes are multiples of 8 (16-byte rows).
// Host code here is the launch logic only, shared by attention.cu (CUDA launches) and the CPU
// emulation test (tests/gpu/attention_emulated.cc), so both run the same configuration.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/mma.cuh"

namespace moe::kernels::cuda::attn {

using mma::bf16;
using mma::Frag;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename T>
struct FwdArgs {
  const T* q;  // [B*S, H*dqk]
  const T* k;  // [B*S, H*dqk]
  const T* v;  // [B*S, H*dv]
  T* out;      // [B*S, H*dv]
  float* lse;  // [B*H*S]
  int seq, heads, d_qk, d_v;
  float scale_log2;  // softmax scale * log2(e): the kernels work in base 2
};

template <typename T>
struct BwdArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* dout;       // [B*S, H*dv]
  const float* lse;    // [B*H*S]
  const float* delta;  // [B*H*S]: rowsum(dout * out), from AttentionBwdDeltaKernel
  T* dq;
  T* dk;
  T* dv;
  int seq, heads, d_qk, d_v;
  float scale, scale_log2;
};

// Shapes of the forward: warps of 16 query rows (bf16: 8, a 128-row tile, so each K/V tile read
// from L2 serves 128 queries; fp32: 4, which its shared memory allows at head size 256), 64-key
// tiles.
template <typename T, int KD, int VD>
struct FwdCfg {
  static constexpr int kWarps = std::is_same_v<T, bf16> ? 8 : 4, kThreads = 32 * kWarps,
                       kM = 16 * kWarps, kN = 64;
  // Two bf16 blocks per SM where 128 registers suffice (no spills up to (192, 128)).
  static constexpr int kMinBlocks = std::is_same_v<T, bf16> && KD + VD <= 320 ? 2 : 1;
  static constexpr int kPad =
      16 / static_cast<int>(sizeof(T));  // one 16-byte unit per row: no bank conflicts
  static constexpr int kLdQ = KD + kPad, kLdV = VD + kPad, kLdP = kN + kPad;
  // P: in registers for bf16 (the accumulator layout of two 8-key tiles is the A layout of a 16-key
  // step); through shared memory for fp32, whose tf32 A layout differs.
  static constexpr int kSizeQ = kM * kLdQ, kSizeK = kN * kLdQ, kSizeV = kN * kLdV;
  static constexpr int kSizeP = std::is_same_v<T, bf16> ? 0 : kM * kLdP;
  static constexpr size_t kSmemBytes =
      sizeof(T) * static_cast<size_t>(kSizeQ + kSizeK + kSizeV + kSizeP);
};

// Shapes of the two backward passes: square tiles of kTile rows, kWarps warps arranged as kTile/16
// row groups x kSplit column splits (bf16: 64-row tiles, 8 warps; fp32: 32-row tiles, 4 warps, so
// that its tiles fit in shared memory at head size 256).
template <typename T, int KD, int VD>
struct BwdCfg {
  static constexpr bool kBf16 = std::is_same_v<T, bf16>;
  static constexpr int kTile = kBf16 ? 64 : 32, kWarps = kBf16 ? 8 : 4, kThreads = 32 * kWarps;
  static constexpr int kRowGroups = kTile / 16, kSplit = kWarps / kRowGroups;
  // Two dK/dV blocks per SM where their registers allow (128 each: (192, 128) spills 8 bytes,
  // (256, 256) would spill kilobytes); the dQ blocks fit two per SM as they are.
  static constexpr int kKvMinBlocks = kBf16 && KD + VD <= 320 ? 2 : 1;
  static constexpr int kPad = 16 / static_cast<int>(sizeof(T));
  static constexpr int kLdQ = KD + kPad, kLdV = VD + kPad, kLdS = kTile + kPad;
  static constexpr int kSizeQ = kTile * kLdQ, kSizeV = kTile * kLdV, kSizeS = kTile * kLdS;
  // dK/dV pass: K, V, Q, dO, P^T, dS^T (T) and lse, D of the query tile (fp32).
  static constexpr size_t kKvSmemBytes =
      sizeof(T) * static_cast<size_t>(2 * kSizeQ + 2 * kSizeV + 2 * kSizeS) +
      2 * sizeof(float) * kTile;
  // dQ pass: Q, dO, K, V, dS.
  static constexpr size_t kQSmemBytes =
      sizeof(T) * static_cast<size_t>(2 * kSizeQ + 2 * kSizeV + kSizeS);
  static_assert((kTile / kSplit) % 16 == 0 && (KD / kSplit) % 16 == 0 && (VD / kSplit) % 16 == 0,
                "warp column ranges are whole pairs of 8-column tiles");
};

// ---- Device helpers ----

MOE_DEVICE int RoundUp16(int x) { return (x + 15) & ~15; }

// rows x cols (cols a multiple of 16 bytes' worth) from global (row stride ldg) into shared (row
// stride lds), asynchronously; rows at or past rows_valid are zero-filled.
template <typename T>
MOE_DEVICE void LoadTileAsync(T* s, int lds, const T* g, int64_t ldg, int rows_valid, int rows,
                              int cols) {
  constexpr int kE = 16 / static_cast<int>(sizeof(T));
  const int chunks = cols / kE;
  for (int c = static_cast<int>(threadIdx.x); c < rows * chunks;
       c += static_cast<int>(blockDim.x)) {
    const int r = c / chunks, col = (c - r * chunks) * kE;
    const bool valid = r < rows_valid;
    mma::CpAsync16(s + r * lds + col, valid ? g + r * ldg + col : g, valid);
  }
}

// Zeros columns [c0, c1) of a shared tile: the padding of a head size up to the compiled one, which
// the loads never write and the MMAs read.
template <typename T>
MOE_DEVICE void ZeroColumns(T* s, int lds, int rows, int c0, int c1) {
  const int w = c1 - c0;
  for (int i = static_cast<int>(threadIdx.x); i < rows * w; i += static_cast<int>(blockDim.x)) {
    s[(i / w) * lds + c0 + i % w] = mma::FromFloat<T>(0.f);
  }
}

MOE_DEVICE float QuadMax(float v) {
  v = fmaxf(v, mma::ShflXor(v, 1));
  return fmaxf(v, mma::ShflXor(v, 2));
}
MOE_DEVICE float QuadSum(float v) {
  v += mma::ShflXor(v, 1);
  return v + mma::ShflXor(v, 2);
}

// acc[m0 + 16-row warp tile][n0 ..] += A (16 x kdim at a_row0 of sa) * B (kdim x N8*8 at n0 of sb,
// NK or KN storage). kdim is a multiple of 16 up to KMAX; n-tile pairs at or past n_limit are
// skipped.
template <typename T, int KMAX, int N8, bool kBKMajor>
MOE_DEVICE void WarpGemm(float (&acc)[N8][4], const T* sa, int lda, int a_row0, const T* sb,
                         int ldb, int n0, int kdim, int n_limit) {
  using F = Frag<T>;
  // fp32 (3xTF32, six MMAs per step) is a correctness path: its k loop stays rolled, which keeps
  // its code, registers and compile time small.
#pragma unroll(std::is_same_v <T, bf16> ? KMAX / 16 : 1)
  for (int k0 = 0; k0 < KMAX; k0 += 16) {
    if (k0 < kdim) {
      typename F::A a;
      F::LoadA(a, sa, lda, a_row0, k0);
#pragma unroll
      for (int j = 0; j < N8 / 2; ++j) {
        if (n0 + 16 * j < n_limit) {
          typename F::B b0, b1;
          if constexpr (kBKMajor) {
            F::LoadB2KN(b0, b1, sb, ldb, n0 + 16 * j, k0);
          } else {
            F::LoadB2NK(b0, b1, sb, ldb, n0 + 16 * j, k0);
          }
          F::Mma(acc[2 * j], a, b0);
          F::Mma(acc[2 * j + 1], a, b1);
        }
      }
    }
  }
}

template <int N8>
MOE_DEVICE void ZeroAcc(float (&acc)[N8][4]) {
#pragma unroll
  for (int j = 0; j < N8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  }
}

// Stores acc * scale (a warp's 16 rows from row0, N8*8 columns from col0) into global rows <
// rows_valid and columns < cols_valid (row stride ld).
template <typename T, int N8>
MOE_DEVICE void StoreAcc(const float (&acc)[N8][4], float scale, T* g, int64_t ld, int row0,
                         int rows_valid, int col0, int cols_valid) {
  const int l = mma::LaneId(), r0 = row0 + (l >> 2), c = col0 + 2 * (l & 3);
#pragma unroll
  for (int j = 0; j < N8; ++j) {
    if (c + 8 * j < cols_valid) {
      if (r0 < rows_valid)
        mma::StorePair(g + r0 * ld + c + 8 * j, acc[j][0] * scale, acc[j][1] * scale);
      if (r0 + 8 < rows_valid)
        mma::StorePair(g + (r0 + 8) * ld + c + 8 * j, acc[j][2] * scale, acc[j][3] * scale);
    }
  }
}

// ---- Forward ----

// One step of the online softmax for a warp's 16 rows over one key tile: s (the raw scores) becomes
// P = exp2(s * scale_log2 - m), the running max m, sum l and the output rows are rescaled.
template <int N8, int V8>
MOE_DEVICE void OnlineSoftmax(float (&s)[N8][4], float (&o)[V8][4], float (&m)[2], float (&l)[2],
                              float scale_log2, bool mask, int key0, int row0) {
  const int lane = mma::LaneId(), col = key0 + 2 * (lane & 3), r = row0 + (lane >> 2);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < N8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[j][e] * scale_log2;
      if (mask && col + 8 * j + (e & 1) > r + (e >> 1) * 8) x = -INFINITY;
      s[j][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  }
  float ref[2], alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_new = fmaxf(m[i], QuadMax(mx[i]));
    ref[i] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing unmasked yet stays at zero
    alpha[i] = exp2f(m[i] - ref[i]);
    m[i] = m_new;
  }
#pragma unroll
  for (int j = 0; j < N8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = exp2f(s[j][e] - ref[e >> 1]);
      sum[e >> 1] += s[j][e];
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
    l[i] = l[i] * alpha[i] + sum[i];  // this lane's columns; summed over the quad at the end
#pragma unroll
  for (int j = 0; j < V8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] *= alpha[e >> 1];
  }
}

// o += P V for a warp's 16 rows: P (softmax numerators of one key tile, accumulator layout), V a
// shared tile [key][d_v]; spw is the warp's shared P tile (fp32 only).
template <typename T, int VD, int N8>
MOE_DEVICE void AccumulatePv(float (&o)[VD / 8][4], const float (&p)[N8][4], T* spw, int ldp,
                             const T* sv, int ldv, int d_v) {
  using F = Frag<T>;
  if constexpr (std::is_same_v<T, bf16>) {
#pragma unroll
    for (int kk = 0; kk < N8 / 2; ++kk) {
      typename F::A a;
      a.r[0] = mma::PackBf16(p[2 * kk][0], p[2 * kk][1]);
      a.r[1] = mma::PackBf16(p[2 * kk][2], p[2 * kk][3]);
      a.r[2] = mma::PackBf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
      a.r[3] = mma::PackBf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
      for (int j = 0; j < VD / 16; ++j) {
        if (16 * j < d_v) {
          typename F::B b0, b1;
          F::LoadB2KN(b0, b1, sv, ldv, 16 * j, 16 * kk);
          F::Mma(o[2 * j], a, b0);
          F::Mma(o[2 * j + 1], a, b1);
        }
      }
    }
  } else {
    WarpGemm<T, 8 * N8, VD / 8, true>(o, spw, ldp, 0, sv, ldv, 0, 8 * N8, d_v);
  }
}

template <typename T, int KD, int VD>
__global__ void __launch_bounds__(FwdCfg<T, KD, VD>::kThreads, FwdCfg<T, KD, VD>::kMinBlocks)
    AttentionFwdKernel(const FwdArgs<T> a) {
  using C = FwdCfg<T, KD, VD>;
  constexpr int kM = C::kM, kN = C::kN;
  MOE_DYNAMIC_SMEM(smem);
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + C::kSizeQ;
  T* sv = sk + C::kSizeK;
  T* sp = sv + C::kSizeV;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = mma::LaneId();
  const int num_m = (a.seq + kM - 1) / kM;
  const int m0 = (num_m - 1 - static_cast<int>(blockIdx.x)) * kM;  // the longest rows start first
  const int bh = static_cast<int>(blockIdx.y), b = bh / a.heads, h = bh % a.heads;
  const int64_t ldq = static_cast<int64_t>(a.heads) * a.d_qk,
                ldv = static_cast<int64_t>(a.heads) * a.d_v;
  const int64_t tok0 = static_cast<int64_t>(b) * a.seq;
  const T* q = a.q + tok0 * ldq + h * a.d_qk;
  const T* k = a.k + tok0 * ldq + h * a.d_qk;
  const T* v = a.v + tok0 * ldv + h * a.d_v;
  const int tiles_n = (a.seq + kN - 1) / kN, diag_n = (m0 + kM - 1) / kN + 1;
  const int num_n = tiles_n < diag_n ? tiles_n : diag_n;
  const int kq = RoundUp16(a.d_qk), wrow = m0 + 16 * warp;

  ZeroColumns(sq, C::kLdQ, kM, a.d_qk, KD);
  ZeroColumns(sk, C::kLdQ, kN, a.d_qk, KD);
  ZeroColumns(sv, C::kLdV, kN, a.d_v, VD);
  LoadTileAsync(sq, C::kLdQ, q + m0 * ldq, ldq, a.seq - m0, kM, a.d_qk);
  LoadTileAsync(sk, C::kLdQ, k, ldq, a.seq, kN, a.d_qk);
  mma::CpAsyncCommit();

  float o[VD / 8][4];
  ZeroAcc(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  T* spw = sp + 16 * warp * C::kLdP;
  for (int nt = 0; nt < num_n; ++nt) {
    const int n0 = nt * kN;
    LoadTileAsync(sv, C::kLdV, v + n0 * ldv, ldv, a.seq - n0, kN, a.d_v);
    mma::CpAsyncCommit();
    mma::CpAsyncWait<1>();  // Q and this K tile
    __syncthreads();
    // A warp whose 16 rows all precede this key tile (the upper half of a 128-row tile's last key
    // tile) skips it; it still meets every barrier and issues its share of the loads.
    const bool live = n0 <= wrow + 15;
    float s[kN / 8][4];
    ZeroAcc(s);
    if (live) WarpGemm<T, KD, kN / 8, false>(s, sq, C::kLdQ, 16 * warp, sk, C::kLdQ, 0, kq, kN);
    __syncthreads();  // every warp is done with this K tile
    const bool more = nt + 1 < num_n;
    if (more) {
      LoadTileAsync(sk, C::kLdQ, k + (n0 + kN) * ldq, ldq, a.seq - n0 - kN, kN, a.d_qk);
      mma::CpAsyncCommit();
    }
    if (live) OnlineSoftmax(s, o, m, l, a.scale_log2, n0 + kN - 1 > wrow, n0, wrow);
    if constexpr (C::kSizeP > 0) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) mma::StoreC(s[j], spw, C::kLdP, 0, 8 * j);
    }
    if (more) {
      mma::CpAsyncWait<1>();  // this V tile
    } else {
      mma::CpAsyncWait<0>();
    }
    __syncthreads();
    if (live) AccumulatePv<T, VD>(o, s, spw, C::kLdP, sv, C::kLdV, a.d_v);
    __syncthreads();  // every warp is done with this V tile
  }

  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = QuadSum(l[i]);
    inv[i] = l[i] > 0.f ? 1.f / l[i] : 0.f;
  }
  T* out = a.out + tok0 * ldv + h * a.d_v;
  const int r0 = wrow + (lane >> 2), c = 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < VD / 8; ++j) {
    if (c + 8 * j < a.d_v) {
      if (r0 < a.seq)
        mma::StorePair(out + r0 * ldv + c + 8 * j, o[j][0] * inv[0], o[j][1] * inv[0]);
      if (r0 + 8 < a.seq)
        mma::StorePair(out + (r0 + 8) * ldv + c + 8 * j, o[j][2] * inv[1], o[j][3] * inv[1]);
    }
  }
  if ((lane & 3) == 0) {
    float* lse = a.lse + static_cast<int64_t>(bh) * a.seq;
    if (r0 < a.seq) lse[r0] = (m[0] + log2f(l[0])) * kLn2;
    if (r0 + 8 < a.seq) lse[r0 + 8] = (m[1] + log2f(l[1])) * kLn2;
  }
}

// ---- Backward ----

// delta[(b*H + h)*S + s] = sum_c dout[t, h*dv + c] * out[t, h*dv + c], t = b*S + s: one warp per
// row.
template <typename T>
__global__ void __launch_bounds__(256)
    AttentionBwdDeltaKernel(const T* out, const T* dout, float* delta, int64_t tokens, int seq,
                            int heads, int dv) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= tokens * heads) return;  // whole warps
  const int lane = mma::LaneId();
  const int64_t t = row / heads;
  const int h = static_cast<int>(row % heads);
  const T* o = out + t * heads * dv + h * dv;
  const T* d = dout + t * heads * dv + h * dv;
  float acc = 0.f;
  for (int c = lane; c < dv; c += 32) acc += mma::ToFloat(o[c]) * mma::ToFloat(d[c]);
  acc = QuadSum(acc);
  acc += mma::ShflXor(acc, 4);
  acc += mma::ShflXor(acc, 8);
  acc += mma::ShflXor(acc, 16);
  if (lane == 0) delta[((t / seq) * heads + h) * seq + t % seq] = acc;
}

// dK, dV of one key tile: walks the query tiles from the diagonal down.
template <typename T, int KD, int VD>
__global__ void __launch_bounds__(BwdCfg<T, KD, VD>::kThreads, BwdCfg<T, KD, VD>::kKvMinBlocks)
    AttentionBwdKvKernel(const BwdArgs<T> a) {
  using C = BwdCfg<T, KD, VD>;
  constexpr int kT = C::kTile, kQw = kT / C::kSplit, kKc = KD / C::kSplit, kVc = VD / C::kSplit;
  MOE_DYNAMIC_SMEM(smem);
  T* sk = reinterpret_cast<T*>(smem);
  T* sq = sk + C::kSizeQ;
  T* sv = sq + C::kSizeQ;
  T* sdo = sv + C::kSizeV;
  T* spt = sdo + C::kSizeV;                                // P^T [key][query]
  T* sdst = spt + C::kSizeS;                               // dS^T [key][query]
  float* sl = reinterpret_cast<float*>(sdst + C::kSizeS);  // lse * log2(e) of the query tile
  float* sd = sl + kT;                                     // D of the query tile
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = mma::LaneId();
  const int kr = 16 * (warp % C::kRowGroups), split = warp / C::kRowGroups;
  const int n0 = static_cast<int>(blockIdx.x) *
                 kT;  // the first key tiles have the most work: they start first
  const int bh = static_cast<int>(blockIdx.y), b = bh / a.heads, h = bh % a.heads;
  const int64_t ldq = static_cast<int64_t>(a.heads) * a.d_qk,
                ldv = static_cast<int64_t>(a.heads) * a.d_v;
  const int64_t tok0 = static_cast<int64_t>(b) * a.seq;
  const int64_t qoff = tok0 * ldq + h * a.d_qk, voff = tok0 * ldv + h * a.d_v;
  const int kq = RoundUp16(a.d_qk), kv = RoundUp16(a.d_v);

  ZeroColumns(sk, C::kLdQ, kT, a.d_qk, KD);
  ZeroColumns(sq, C::kLdQ, kT, a.d_qk, KD);
  ZeroColumns(sv, C::kLdV, kT, a.d_v, VD);
  ZeroColumns(sdo, C::kLdV, kT, a.d_v, VD);
  LoadTileAsync(sk, C::kLdQ, a.k + qoff + n0 * ldq, ldq, a.seq - n0, kT, a.d_qk);
  LoadTileAsync(sv, C::kLdV, a.v + voff + n0 * ldv, ldv, a.seq - n0, kT, a.d_v);
  mma::CpAsyncCommit();

  float dk[kKc / 8][4], dv[kVc / 8][4];
  ZeroAcc(dk);
  ZeroAcc(dv);
  const int num_m = (a.seq + kT - 1) / kT, qc0 = split * kQw;
  const float* lse = a.lse + static_cast<int64_t>(bh) * a.seq;
  const float* delta = a.delta + static_cast<int64_t>(bh) * a.seq;
  for (int m0 = n0; m0 < num_m * kT; m0 += kT) {
    LoadTileAsync(sq, C::kLdQ, a.q + qoff + m0 * ldq, ldq, a.seq - m0, kT, a.d_qk);
    LoadTileAsync(sdo, C::kLdV, a.dout + voff + m0 * ldv, ldv, a.seq - m0, kT, a.d_v);
    mma::CpAsyncCommit();
    for (int i = static_cast<int>(threadIdx.x); i < kT; i += C::kThreads) {
      const bool valid = m0 + i < a.seq;
      sl[i] = valid ? lse[m0 + i] * kLog2e : 0.f;
      sd[i] = valid ? delta[m0 + i] : 0.f;
    }
    mma::CpAsyncWait<0>();
    __syncthreads();
    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x kQw queries.
    float st[kQw / 8][4], dpt[kQw / 8][4];
    ZeroAcc(st);
    ZeroAcc(dpt);
    WarpGemm<T, KD, kQw / 8, false>(st, sk, C::kLdQ, kr, sq, C::kLdQ, qc0, kq, kT);
    WarpGemm<T, VD, kQw / 8, false>(dpt, sv, C::kLdV, kr, sdo, C::kLdV, qc0, kv, kT);
    const bool mask = m0 < n0 + kT - 1 || m0 + kT > a.seq;
    const int key = n0 + kr + (lane >> 2), qc = qc0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < kQw / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = qc + 8 * j + (e & 1), row = m0 + col;
        const bool off = mask && (key + (e >> 1) * 8 > row || row >= a.seq);
        const float p = off ? 0.f : exp2f(st[j][e] * a.scale_log2 - sl[col]);
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - sd[col]);
      }
      mma::StoreC(st[j], spt, C::kLdS, kr, qc0 + 8 * j);
      mma::StoreC(dpt[j], sdst, C::kLdS, kr, qc0 + 8 * j);
    }
    __syncthreads();
    // dV += P^T dO and dK += dS^T Q for this warp's 16 keys x its column range.
    WarpGemm<T, kT, kVc / 8, true>(dv, spt, C::kLdS, kr, sdo, C::kLdV, split * kVc, kT, a.d_v);
    WarpGemm<T, kT, kKc / 8, true>(dk, sdst, C::kLdS, kr, sq, C::kLdQ, split * kKc, kT, a.d_qk);
    __syncthreads();  // before the next query tile overwrites Q, dO, P^T, dS^T
  }
  StoreAcc(dk, a.scale, a.dk + qoff, ldq, n0 + kr, a.seq, split * kKc, a.d_qk);
  StoreAcc(dv, 1.f, a.dv + voff, ldv, n0 + kr, a.seq, split * kVc, a.d_v);
}

// dQ of one query tile: walks the key tiles up to the diagonal.
template <typename T, int KD, int VD>
__global__ void __launch_bounds__(BwdCfg<T, KD, VD>::kThreads)
    AttentionBwdQKernel(const BwdArgs<T> a) {
  using C = BwdCfg<T, KD, VD>;
  constexpr int kT = C::kTile, kNw = kT / C::kSplit, kKc = KD / C::kSplit;
  MOE_DYNAMIC_SMEM(smem);
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + C::kSizeQ;
  T* sdo = sk + C::kSizeQ;
  T* sv = sdo + C::kSizeV;
  T* sds = sv + C::kSizeV;  // dS [query][key]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = mma::LaneId();
  const int mr = 16 * (warp % C::kRowGroups), split = warp / C::kRowGroups;
  const int num_m = (a.seq + kT - 1) / kT;
  const int m0 = (num_m - 1 - static_cast<int>(blockIdx.x)) * kT;  // the longest rows start first
  const int bh = static_cast<int>(blockIdx.y), b = bh / a.heads, h = bh % a.heads;
  const int64_t ldq = static_cast<int64_t>(a.heads) * a.d_qk,
                ldv = static_cast<int64_t>(a.heads) * a.d_v;
  const int64_t tok0 = static_cast<int64_t>(b) * a.seq;
  const int64_t qoff = tok0 * ldq + h * a.d_qk, voff = tok0 * ldv + h * a.d_v;
  const int kq = RoundUp16(a.d_qk), kv = RoundUp16(a.d_v);

  ZeroColumns(sq, C::kLdQ, kT, a.d_qk, KD);
  ZeroColumns(sk, C::kLdQ, kT, a.d_qk, KD);
  ZeroColumns(sdo, C::kLdV, kT, a.d_v, VD);
  ZeroColumns(sv, C::kLdV, kT, a.d_v, VD);
  LoadTileAsync(sq, C::kLdQ, a.q + qoff + m0 * ldq, ldq, a.seq - m0, kT, a.d_qk);
  LoadTileAsync(sdo, C::kLdV, a.dout + voff + m0 * ldv, ldv, a.seq - m0, kT, a.d_v);
  LoadTileAsync(sk, C::kLdQ, a.k + qoff, ldq, a.seq, kT, a.d_qk);
  LoadTileAsync(sv, C::kLdV, a.v + voff, ldv, a.seq, kT, a.d_v);
  mma::CpAsyncCommit();

  // This lane's two rows: lse (base 2) and D.
  const int r0 = m0 + mr + (lane >> 2);
  float lse2[2], dd[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 8 * i;
    const bool valid = r < a.seq;
    lse2[i] = valid ? a.lse[static_cast<int64_t>(bh) * a.seq + r] * kLog2e : 0.f;
    dd[i] = valid ? a.delta[static_cast<int64_t>(bh) * a.seq + r] : 0.f;
  }
  float dq[kKc / 8][4];
  ZeroAcc(dq);
  const int num_n = (m0 + kT - 1) / kT + 1, kc0 = split * kNw;
  for (int nt = 0; nt < num_n; ++nt) {
    const int n0 = nt * kT;
    mma::CpAsyncWait<0>();
    __syncthreads();
    // S = Q K^T and dP = dO V^T for this warp's 16 queries x kNw keys.
    float s[kNw / 8][4], dp[kNw / 8][4];
    ZeroAcc(s);
    ZeroAcc(dp);
    WarpGemm<T, KD, kNw / 8, false>(s, sq, C::kLdQ, mr, sk, C::kLdQ, kc0, kq, kT);
    WarpGemm<T, VD, kNw / 8, false>(dp, sdo, C::kLdV, mr, sv, C::kLdV, kc0, kv, kT);
    const bool mask = n0 + kT - 1 > m0 + mr;
    const int kcol = n0 + kc0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < kNw / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool off = mask && kcol + 8 * j + (e & 1) > r0 + (e >> 1) * 8;
        const float p = off ? 0.f : exp2f(s[j][e] * a.scale_log2 - lse2[e >> 1]);
        dp[j][e] = p * (dp[j][e] - dd[e >> 1]);
      }
      mma::StoreC(dp[j], sds, C::kLdS, mr, kc0 + 8 * j);
    }
    __syncthreads();  // dS complete; every warp is done with V
    const bool more = nt + 1 < num_n;
    if (more) {
      LoadTileAsync(sv, C::kLdV, a.v + voff + (n0 + kT) * ldv, ldv, a.seq - n0 - kT, kT, a.d_v);
      mma::CpAsyncCommit();
    }
    // dQ += dS K for this warp's 16 queries x its column range.
    WarpGemm<T, kT, kKc / 8, true>(dq, sds, C::kLdS, mr, sk, C::kLdQ, split * kKc, kT, a.d_qk);
    __syncthreads();  // every warp is done with K and dS
    if (more) {
      LoadTileAsync(sk, C::kLdQ, a.k + qoff + (n0 + kT) * ldq, ldq, a.seq - n0 - kT, kT, a.d_qk);
      mma::CpAsyncCommit();
    }
  }
  StoreAcc(dq, a.scale, a.dq + qoff, ldq, m0 + mr, a.seq, split * kKc, a.d_qk);
}

// ---- Launch logic (host) ----

// Calls fn(std::integral_constant<int, KD>, std::integral_constant<int, VD>) for the compiled shape
// that holds (dqk, dv). The caller has checked dqk, dv <= 256.
template <typename Fn>
void WithHeadShape(int dqk, int dv, Fn&& fn) {
  using std::integral_constant;
  if (dqk <= 64 && dv <= 64) {
    fn(integral_constant<int, 64>(), integral_constant<int, 64>());
  } else if (dqk <= 128 && dv <= 128) {
    fn(integral_constant<int, 128>(), integral_constant<int, 128>());
  } else if (dqk <= 192 && dv <= 128) {
    fn(integral_constant<int, 192>(), integral_constant<int, 128>());
  } else {
    fn(integral_constant<int, 256>(), integral_constant<int, 256>());
  }
}

// launch(kernel, grid, block, shared_bytes, args) runs one kernel: a CUDA launch, or the
// emulator's.
template <typename T, typename Launch>
void Forward(const FwdArgs<T>& a, int batch, Launch&& launch) {
  WithHeadShape(a.d_qk, a.d_v, [&](auto kd, auto vd) {
    using C = FwdCfg<T, decltype(kd)::value, decltype(vd)::value>;
    const dim3 grid((a.seq + C::kM - 1) / C::kM, batch * a.heads);
    launch(&AttentionFwdKernel<T, decltype(kd)::value, decltype(vd)::value>, grid,
           dim3(C::kThreads), C::kSmemBytes, a);
  });
}

// delta must hold B*H*S floats; a.delta points to it.
template <typename T, typename Launch>
void Backward(const BwdArgs<T>& a, const T* out, float* delta, int batch, Launch&& launch) {
  const int64_t tokens = static_cast<int64_t>(batch) * a.seq;
  const int64_t warps = tokens * a.heads;
  launch(&AttentionBwdDeltaKernel<T>, dim3(static_cast<unsigned>((warps + 7) / 8)), dim3(256),
         size_t{0}, out, a.dout, delta, tokens, a.seq, a.heads, a.d_v);
  WithHeadShape(a.d_qk, a.d_v, [&](auto kd, auto vd) {
    constexpr int KD = decltype(kd)::value, VD = decltype(vd)::value;
    using C = BwdCfg<T, KD, VD>;
    const dim3 grid((a.seq + C::kTile - 1) / C::kTile, batch * a.heads);
    launch(&AttentionBwdKvKernel<T, KD, VD>, grid, dim3(C::kThreads), C::kKvSmemBytes, a);
    launch(&AttentionBwdQKernel<T, KD, VD>, grid, dim3(C::kThreads), C::kQSmemBytes, a);
  });
}

}  // namespace moe::kernels::cuda::attn
