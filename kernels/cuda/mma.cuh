// Warp-level building blocks of the tiled tensor-core kernels (attention_kernels.cuh): mma.sync,
// ldmatrix and cp.async, and Frag<T>, which writes the PTX ISA's fragment layouts out once per
// storage type:
//   bf16: mma.m16n8k16 (bf16 in, fp32 accumulators), fragments loaded with ldmatrix;
//   f32:  three mma.m16n8k8 tf32 products per step (hi*hi + hi*lo + lo*hi, "3xTF32"), which keeps
//         fp32 accuracy (about 2^-21 per product) on the tensor cores; plain shared-memory loads.
// Both share the accumulator layout of a 16x8 fp32 tile: lane l holds rows l/4 and l/4 + 8, columns
// 2*(l%4) and 2*(l%4) + 1, as c[0], c[1] (upper row) and c[2], c[3] (lower row).
//
// nvcc compiles the PTX below. A host compiler compiles the same kernels only under
// tests/gpu/cuda_emulator.h, which supplies these primitives (written from the same PTX ISA tables)
// and runs every CUDA thread as a host thread: the kernels' indexing, masking, pipelining and
// barriers are then tested on a machine with no GPU (ctest gpu_attention_emulated).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define MOE_DEVICE __device__ __forceinline__
// Dynamic shared memory of a kernel, as bytes.
#define MOE_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#elif !defined(MOE_CUDA_EMULATOR)
#error "kernels/cuda/mma.cuh: compile with nvcc, or include tests/gpu/cuda_emulator.h first"
#endif

namespace moe::kernels::cuda::mma {

using bf16 = __nv_bfloat16;

#if defined(__CUDACC__)
// d += a * b for one 16x8x16 tile: a row-major 16x16 bf16, b column-major 16x8 bf16, d fp32.
MOE_DEVICE void MmaBf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d += a * b for one 16x8x8 tile of tf32 operands (fp32 bit patterns with the low 13 bits unused).
MOE_DEVICE void MmaTf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Four 8x8 b16 matrices: lane l gives the address of row l%8 of matrix l/8 (16 bytes, 16-aligned);
// r[i] of lane l holds row l/4, columns 2*(l%4), +1 of matrix i (transposed: rows 2*(l%4), +1 of
// column l/4).
MOE_DEVICE void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
MOE_DEVICE void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}
// 16 bytes global -> shared, asynchronously; zeros instead when !valid (nothing is read).
MOE_DEVICE void CpAsync16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes)
               : "memory");
}
MOE_DEVICE void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
MOE_DEVICE void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// fp32 -> tf32, rounded to nearest (ties away), as an fp32 bit pattern.
MOE_DEVICE uint32_t ToTf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
MOE_DEVICE float ShflXor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
MOE_DEVICE int LaneId() { return static_cast<int>(threadIdx.x & 31u); }
#endif  // __CUDACC__

MOE_DEVICE float BitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
MOE_DEVICE uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}
// Aligned 4- and 8-byte stores (shared or global).
MOE_DEVICE void Store32(void* p, uint32_t v) {
#if defined(__CUDACC__)
  *static_cast<uint32_t*>(p) = v;
#else
  memcpy(p, &v, sizeof v);
#endif
}
MOE_DEVICE void StoreF2(float* p, float a, float b) {
#if defined(__CUDACC__)
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
#else
  p[0] = a;
  p[1] = b;
#endif
}
MOE_DEVICE float ToFloat(float v) { return v; }
MOE_DEVICE float ToFloat(bf16 v) { return __bfloat162float(v); }
template <typename T>
MOE_DEVICE T FromFloat(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16_rn(v);
  }
}
// Two consecutive outputs (an accumulator pair), rounded to T.
MOE_DEVICE void StorePair(float* p, float a, float b) { StoreF2(p, a, b); }
MOE_DEVICE void StorePair(bf16* p, float a, float b) { Store32(p, PackBf16(a, b)); }

// Fragments of one k = 16 step of C[16 x 8] += A[16 x 16] B[16 x 8], loaded from shared-memory
// tiles (ld: the row stride in elements, a multiple of 8 for bf16 so that rows are 16-byte
// aligned):
//   LoadA:    A[m][k]  = x[(m0 + m) * ld + k0 + k]        (row-major A)
//   LoadB2NK: B[k][n]  = x[(n0 + n) * ld + k0 + k]        (B stored as its transpose, n-major)
//   LoadB2KN: B[k][n]  = x[(k0 + k) * ld + n0 + n]        (B stored k-major)
// The B loads fill two n-tiles at once: columns n0..n0+7 and n0+8..n0+15.
template <typename T>
struct Frag;

template <>
struct Frag<bf16> {
  struct A {
    uint32_t
        r[4];  // (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..): g = lane/4, t = lane%4
  };
  struct B {
    uint32_t r[2];  // k = 2t..2t+1 and 2t+8..2t+9, n = g
  };
  static MOE_DEVICE void LoadA(A& a, const bf16* x, int ld, int m0, int k0) {
    const int l = LaneId();
    // matrices: (m0, k0), (m0+8, k0), (m0, k0+8), (m0+8, k0+8)
    LdMatrixX4(a.r, x + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
  }
  static MOE_DEVICE void LoadB2NK(B& b0, B& b1, const bf16* x, int ld, int n0, int k0) {
    const int l = LaneId();
    uint32_t r[4];
    // matrices (rows n, columns k): (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8)
    LdMatrixX4(r, x + (n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
    b0.r[0] = r[0];
    b0.r[1] = r[1];
    b1.r[0] = r[2];
    b1.r[1] = r[3];
  }
  static MOE_DEVICE void LoadB2KN(B& b0, B& b1, const bf16* x, int ld, int n0, int k0) {
    const int l = LaneId();
    uint32_t r[4];
    // matrices (rows k, columns n), transposed on load: (k0, n0), (k0+8, n0), (k0, n0+8), (k0+8,
    // n0+8)
    LdMatrixX4Trans(r, x + (k0 + (l & 15)) * ld + n0 + (l >> 4) * 8);
    b0.r[0] = r[0];
    b0.r[1] = r[1];
    b1.r[0] = r[2];
    b1.r[1] = r[3];
  }
  static MOE_DEVICE void Mma(float (&d)[4], const A& a, const B& b) { MmaBf16(d, a.r, b.r); }
};

template <>
struct Frag<float> {
  struct A {
    float r[8];  // per k half h (k 8h..8h+7): (g, t), (g+8, t), (g, t+4), (g+8, t+4)
  };
  struct B {
    float r[4];  // per k half h: k = t and t+4, n = g
  };
  static MOE_DEVICE void LoadA(A& a, const float* x, int ld, int m0, int k0) {
    const int l = LaneId(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* p = x + (m0 + g) * ld + k0 + 8 * h + t;
      a.r[4 * h] = p[0];
      a.r[4 * h + 1] = p[8 * ld];
      a.r[4 * h + 2] = p[4];
      a.r[4 * h + 3] = p[8 * ld + 4];
    }
  }
  static MOE_DEVICE void LoadB2NK(B& b0, B& b1, const float* x, int ld, int n0, int k0) {
    const int l = LaneId(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* p = x + (n0 + g) * ld + k0 + 8 * h + t;
      b0.r[2 * h] = p[0];
      b0.r[2 * h + 1] = p[4];
      b1.r[2 * h] = p[8 * ld];
      b1.r[2 * h + 1] = p[8 * ld + 4];
    }
  }
  static MOE_DEVICE void LoadB2KN(B& b0, B& b1, const float* x, int ld, int n0, int k0) {
    const int l = LaneId(), g = l >> 2, t = l & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* p = x + (k0 + 8 * h + t) * ld + n0 + g;
      b0.r[2 * h] = p[0];
      b0.r[2 * h + 1] = p[4 * ld];
      b1.r[2 * h] = p[8];
      b1.r[2 * h + 1] = p[4 * ld + 8];
    }
  }
  static MOE_DEVICE void Split(float x, uint32_t& hi, uint32_t& lo) {
    hi = ToTf32(x);
    lo = ToTf32(x - BitsToFloat(hi));
  }
  static MOE_DEVICE void Mma(float (&d)[4], const A& a, const B& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) Split(a.r[4 * h + i], ah[i], al[i]);
#pragma unroll
      for (int i = 0; i < 2; ++i) Split(b.r[2 * h + i], bh[i], bl[i]);
      MmaTf32(d, al, bh);  // the small products first
      MmaTf32(d, ah, bl);
      MmaTf32(d, ah, bh);
    }
  }
};

// Stores an accumulator tile c (16 x 8, the layout above) at x[(m0 + row) * ld + n0 + col], as T.
template <typename T>
MOE_DEVICE void StoreC(const float (&c)[4], T* x, int ld, int m0, int n0) {
  const int l = LaneId(), g = l >> 2, t = l & 3;
  StorePair(x + (m0 + g) * ld + n0 + 2 * t, c[0], c[1]);
  StorePair(x + (m0 + g + 8) * ld + n0 + 2 * t, c[2], c[3]);
}

}  // namespace moe::kernels::cuda::mma
