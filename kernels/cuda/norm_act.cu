// RMSNorm, RoPE and SwiGLU.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void RmsNormForwardKernel(const T* x, const T* w, float eps, T* y, float* rstd, int64_t d) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * d;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = Ld(xr[j]);
    ss += v * v;
  }
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) y[r * d + j] = Cvt<T>(Ld(xr[j]) * inv * Ld(w[j]));
}

// One block per row writes dx; dw is summed over a strip of rows per block in registers, then added
// once per column (an atomic per column and block, not per element).
template <typename T>
__global__ void RmsNormBackwardKernel(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* dw, int64_t rows,
                                      int64_t d, int64_t rows_per_block) {
  const int64_t r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = dy + r * d;
    const T* xr = x + r * d;
    const float inv = rstd[r];
    float dot = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += Ld(g[j]) * Ld(w[j]) * Ld(xr[j]);
    dot = BlockSum(dot);
    const float coef = dot * inv * inv * inv / static_cast<float>(d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dx[r * d + j] = Cvt<T>(Ld(g[j]) * Ld(w[j]) * inv - Ld(xr[j]) * coef);
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) acc += Ld(dy[r * d + j]) * Ld(x[r * d + j]) * rstd[r];
    atomicAdd(&dw[j], acc);
  }
}

template <typename T>
__global__ void RopeKernel(T* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, float sign) {
  const int64_t half = head_dim / 2, per_token = 2 * heads * half;
  MOE_CUDA_LOOP(i, tokens * per_token) {
    const int64_t t = i / per_token, rest = i % per_token;
    const int64_t part = rest / (heads * half), h = (rest / half) % heads, p = rest % half;
    const double angle = static_cast<double>(t % seq_len) * pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(head_dim));
    const float c = static_cast<float>(cos(angle)), s = sign * static_cast<float>(sin(angle));
    T* x = qkv + t * 3 * heads * head_dim + part * heads * head_dim + h * head_dim;
    const float x1 = Ld(x[p]), x2 = Ld(x[p + half]);
    x[p] = Cvt<T>(x1 * c - x2 * s);
    x[p + half] = Cvt<T>(x1 * s + x2 * c);
  }
}

template <typename T>
__global__ void SwigluForwardKernel(const T* gu, T* out, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]);
    out[i] = Cvt<T>(g / (1.f + expf(-g)) * u);
  }
}

template <typename T>
__global__ void SwigluBackwardKernel(const T* gu, const T* dout, T* dgu, int64_t rows, int64_t f) {
  MOE_CUDA_LOOP(i, rows * f) {
    const int64_t r = i / f, j = i % f;
    const float g = Ld(gu[r * 2 * f + j]), u = Ld(gu[r * 2 * f + f + j]), dy = Ld(dout[i]);
    const float sig = 1.f / (1.f + expf(-g));
    dgu[r * 2 * f + f + j] = Cvt<T>(dy * g * sig);
    dgu[r * 2 * f + j] = Cvt<T>(dy * u * sig * (1.f + g * (1.f - sig)));
  }
}

}  // namespace

template <typename T>
void RmsNormForward(const T* x, const T* w, float eps, T* y, float* rstd, int64_t rows, int64_t d, cudaStream_t s) {
  if (rows > 0) RmsNormForwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, w, eps, y, rstd, d);
}
template <typename T>
void RmsNormBackward(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* dw, int64_t rows, int64_t d,
                     cudaStream_t s) {
  if (rows == 0) return;
  const int64_t per = 32;
  const int64_t blocks = (rows + per - 1) / per;
  RmsNormBackwardKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(dy, x, w, rstd, dx, dw, rows, d, per);
}
template <typename T>
void Rope(T* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse, cudaStream_t s) {
  if (tokens == 0) return;
  RopeKernel<T><<<Blocks(tokens * heads * head_dim), kThreads, 0, s>>>(qkv, tokens, seq_len, heads, head_dim, theta,
                                                                      inverse ? -1.f : 1.f);
}
template <typename T>
void SwigluForward(const T* gate_up, T* out, int64_t rows, int64_t f, cudaStream_t s) {
  if (rows * f > 0) SwigluForwardKernel<T><<<Blocks(rows * f), kThreads, 0, s>>>(gate_up, out, rows, f);
}
template <typename T>
void SwigluBackward(const T* gate_up, const T* dout, T* dgate_up, int64_t rows, int64_t f, cudaStream_t s) {
  if (rows * f > 0) SwigluBackwardKernel<T><<<Blocks(rows * f), kThreads, 0, s>>>(gate_up, dout, dgate_up, rows, f);
}
MOE_CUDA_INSTANTIATE(RmsNormForward)
MOE_CUDA_INSTANTIATE(RmsNormBackward)
MOE_CUDA_INSTANTIATE(Rope)
MOE_CUDA_INSTANTIATE(SwigluForward)
MOE_CUDA_INSTANTIATE(SwigluBackward)

}  // namespace moe::kernels::cuda
