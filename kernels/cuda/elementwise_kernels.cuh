// Elementwise ops, the sum of squares' per-block partials, row gathers and their scatter-add,
// column-block copies and their sums, f32 <-> bf16 conversions: the kernels of
// kernels/cuda/elementwise.cu, which launches them. nvcc compiles them there; a host compiler
// compiles them under tests/gpu/cuda_emulator.h, which runs them on the CPU against the CPU path
// (ctest gpu_kernels_emulated).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_common.cuh"

namespace moe::kernels::cuda {
// Internal linkage: one translation unit includes them (elementwise.cu, or the emulated test).
namespace {

template <typename T>
__global__ void FillKernel(T* x, int64_t n, float v) {
  const T t = Cvt<T>(v);
  MOE_CUDA_LOOP(i, n) x[i] = t;
}
template <typename T>
__global__ void UniformKernel(T* x, int64_t n, uint64_t seed) {
  MOE_CUDA_LOOP(i, n) x[i] = Cvt<T>(UniformAt(seed, static_cast<uint64_t>(i)));
}
template <typename T>
__global__ void AxpyKernel(T* y, float a, const T* x, int64_t n) {
  MOE_CUDA_LOOP(i, n) y[i] = Cvt<T>(Ld(y[i]) + a * Ld(x[i]));
}
template <typename T>
__global__ void AddKernel(T* out, const T* a, const T* b, int64_t n) {
  MOE_CUDA_LOOP(i, n) out[i] = Cvt<T>(Ld(a[i]) + Ld(b[i]));
}
template <typename T>
__global__ void ScaleKernel(T* x, float a, int64_t n) {
  MOE_CUDA_LOOP(i, n) x[i] = Cvt<T>(Ld(x[i]) * a);
}
// One partial sum per block, in double; the host adds the partials in a fixed order.
template <typename T>
__global__ void SumSquaresKernel(const T* x, int64_t n, double* partial) {
  double s = 0;
  MOE_CUDA_LOOP(i, n) {
    const double v = Ld(x[i]);
    s += v * v;
  }
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}
// Rows move in units of U (16-byte vectors, else 4-byte words when the row allows, else 2-byte
// halves).
template <typename U>
__global__ void GatherRowsKernel(const U* src, const int32_t* index, U* dst, int64_t rows,
                                 int64_t units, int64_t src_rows, unsigned* bad) {
  MOE_CUDA_LOOP(i, rows * units) {
    const int64_t r = i / units, c = i % units, from = index[r];
    dst[i] = InRange(from, src_rows, bad, kBadRowIndex) ? src[from * units + c] : U{};
  }
}
// dst[index[r]] += src[r]: the indices are distinct, so each element has one writer (no atomics).
template <typename T>
__global__ void ScatterAddRowsKernel(const T* src, const int32_t* index, T* dst, int64_t rows,
                                     int64_t cols, int64_t dst_rows, unsigned* bad) {
  MOE_CUDA_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols, to = index[r];
    if (!InRange(to, dst_rows, bad, kBadRowIndex)) continue;
    T* d = dst + to * cols + c;
    *d = Cvt<T>(Ld(*d) + Ld(src[i]));
  }
}
// dst[r, dst_col + c] = src[r / broadcast, src_col + c], as bits (U: the element's size).
template <typename U>
__global__ void CopyColumnsKernel(const U* src, int64_t src_cols, int64_t src_col, U* dst,
                                  int64_t dst_cols, int64_t dst_col, int64_t rows, int64_t width,
                                  int64_t broadcast) {
  MOE_CUDA_LOOP(i, rows * width) {
    const int64_t r = i / width, c = i % width;
    dst[r * dst_cols + dst_col + c] = src[(r / broadcast) * src_cols + src_col + c];
  }
}
// dst[r, dst_col + c] += sum_{j < group} src[r * group + j, src_col + c], added in order of j in
// fp32.
template <typename T>
__global__ void SumColumnsKernel(const T* src, int64_t src_cols, int64_t src_col, T* dst,
                                 int64_t dst_cols, int64_t dst_col, int64_t rows, int64_t width,
                                 int64_t group) {
  MOE_CUDA_LOOP(i, rows * width) {
    const int64_t r = i / width, c = i % width;
    T* d = dst + r * dst_cols + dst_col + c;
    float acc = Ld(*d);
    for (int64_t j = 0; j < group; ++j) acc += Ld(src[(r * group + j) * src_cols + src_col + c]);
    *d = Cvt<T>(acc);
  }
}
// The vector kernels below: 16 bytes a load and a store per thread and step, 32-bit indices; the
// launcher picks them when every pointer is 16-byte aligned and n < 2^31 (VectorOk), else the
// scalar kernels above. The n % lanes elements past the last whole vector are the first threads'
// (one each). Each element is computed exactly as by the scalar kernel: same values, bit for bit.
#define MOE_VEC_TAIL(n, lanes, ...)                                                             \
  do {                                                                                          \
    const uint32_t at_ =                                                                        \
        static_cast<uint32_t>((n) / (lanes) * (lanes)) + blockIdx.x * blockDim.x + threadIdx.x; \
    if (at_ < static_cast<uint32_t>(n)) {                                                       \
      const uint32_t i = at_;                                                                   \
      __VA_ARGS__;                                                                              \
    }                                                                                           \
  } while (0)

template <typename T>
__global__ void AddVecKernel(T* out, const T* a, const T* b, int64_t n) {
  constexpr int L = Vec16<T>::kLanes;
  const auto* va = reinterpret_cast<const Vec16<T>*>(a);
  const auto* vb = reinterpret_cast<const Vec16<T>*>(b);
  MOE_CUDA_LOOP32(i, n / L) {
    const Vec16<T> x = va[i], y = vb[i];
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < L; ++j) o.v[j] = Cvt<T>(Ld(x.v[j]) + Ld(y.v[j]));
    reinterpret_cast<Vec16<T>*>(out)[i] = o;
  }
  MOE_VEC_TAIL(n, L, out[i] = Cvt<T>(Ld(a[i]) + Ld(b[i])));
}
template <typename T>
__global__ void AxpyVecKernel(T* y, float alpha, const T* x, int64_t n) {
  constexpr int L = Vec16<T>::kLanes;
  MOE_CUDA_LOOP32(i, n / L) {
    Vec16<T> o = reinterpret_cast<const Vec16<T>*>(y)[i];
    const Vec16<T> xv = reinterpret_cast<const Vec16<T>*>(x)[i];
#pragma unroll
    for (int j = 0; j < L; ++j) o.v[j] = Cvt<T>(Ld(o.v[j]) + alpha * Ld(xv.v[j]));
    reinterpret_cast<Vec16<T>*>(y)[i] = o;
  }
  MOE_VEC_TAIL(n, L, y[i] = Cvt<T>(Ld(y[i]) + alpha * Ld(x[i])));
}
template <typename T>
__global__ void ScaleVecKernel(T* x, float alpha, int64_t n) {
  constexpr int L = Vec16<T>::kLanes;
  MOE_CUDA_LOOP32(i, n / L) {
    Vec16<T> o = reinterpret_cast<const Vec16<T>*>(x)[i];
#pragma unroll
    for (int j = 0; j < L; ++j) o.v[j] = Cvt<T>(Ld(o.v[j]) * alpha);
    reinterpret_cast<Vec16<T>*>(x)[i] = o;
  }
  MOE_VEC_TAIL(n, L, x[i] = Cvt<T>(Ld(x[i]) * alpha));
}
// f32 -> bf16 eight at a time: two 16-byte loads, one 16-byte store.
__global__ void F32ToBf16VecKernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  MOE_CUDA_LOOP32(i, n / 8) {
    const Vec16<float> lo = reinterpret_cast<const Vec16<float>*>(src)[2 * i],
                       hi = reinterpret_cast<const Vec16<float>*>(src)[2 * i + 1];
    Vec16<__nv_bfloat16> o;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      o.v[j] = __float2bfloat16_rn(lo.v[j]);
      o.v[4 + j] = __float2bfloat16_rn(hi.v[j]);
    }
    reinterpret_cast<Vec16<__nv_bfloat16>*>(dst)[i] = o;
  }
  MOE_VEC_TAIL(n, 8, dst[i] = __float2bfloat16_rn(src[i]));
}
// bf16 -> f32 eight at a time: one 16-byte load, two 16-byte stores.
__global__ void Bf16ToF32VecKernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  MOE_CUDA_LOOP32(i, n / 8) {
    const Vec16<__nv_bfloat16> x = reinterpret_cast<const Vec16<__nv_bfloat16>*>(src)[i];
    Vec16<float> lo, hi;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo.v[j] = __bfloat162float(x.v[j]);
      hi.v[j] = __bfloat162float(x.v[4 + j]);
    }
    reinterpret_cast<Vec16<float>*>(dst)[2 * i] = lo;
    reinterpret_cast<Vec16<float>*>(dst)[2 * i + 1] = hi;
  }
  MOE_VEC_TAIL(n, 8, dst[i] = __bfloat162float(src[i]));
}

__global__ void F32ToBf16Kernel(const float* src, __nv_bfloat16* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void Bf16ToF32Kernel(const __nv_bfloat16* src, float* dst, int64_t n) {
  MOE_CUDA_LOOP(i, n) dst[i] = __bfloat162float(src[i]);
}

}  // namespace
}  // namespace moe::kernels::cuda
