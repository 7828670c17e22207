// RMSNorm, RoPE and SwiGLU.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace moe::kernels::cuda {
namespace {

__global__ void RmsNormForwardKernel(const float* x, const float* w, float eps, float* y, float* rstd, int64_t d) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
  if (threadIdx.x == 0) rstd[r] = inv;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) y[r * d + j] = xr[j] * inv * w[j];
}

__global__ void RmsNormBackwardKernel(const float* dy, const float* x, const float* w, const float* rstd, float* dx,
                                      float* dw, int64_t d) {
  const int64_t r = blockIdx.x;
  const float* g = dy + r * d;
  const float* xr = x + r * d;
  const float inv = rstd[r];
  float dot = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += g[j] * w[j] * xr[j];
  dot = BlockSum(dot);
  const float coef = dot * inv * inv * inv / static_cast<float>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    dx[r * d + j] = g[j] * w[j] * inv - xr[j] * coef;
    atomicAdd(&dw[j], g[j] * xr[j] * inv);
  }
}

__global__ void RopeKernel(float* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta,
                           float sign) {
  const int64_t half = head_dim / 2, per_token = 2 * heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < tokens * per_token; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / per_token, rest = i % per_token;
    const int64_t part = rest / (heads * half), h = (rest / half) % heads, p = rest % half;
    const double angle = static_cast<double>(t % seq_len) * pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(head_dim));
    const float c = static_cast<float>(cos(angle)), s = sign * static_cast<float>(sin(angle));
    float* x = qkv + t * 3 * heads * head_dim + part * heads * head_dim + h * head_dim;
    const float x1 = x[p], x2 = x[p + half];
    x[p] = x1 * c - x2 * s;
    x[p + half] = x1 * s + x2 * c;
  }
}

__global__ void SwigluForwardKernel(const float* gu, float* out, int64_t rows, int64_t f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * f; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / f, j = i % f;
    const float g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j];
    out[i] = g / (1.f + expf(-g)) * u;
  }
}

__global__ void SwigluBackwardKernel(const float* gu, const float* dout, float* dgu, int64_t rows, int64_t f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * f; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / f, j = i % f;
    const float g = gu[r * 2 * f + j], u = gu[r * 2 * f + f + j], dy = dout[i];
    const float sig = 1.f / (1.f + expf(-g));
    dgu[r * 2 * f + f + j] = dy * g * sig;
    dgu[r * 2 * f + j] = dy * u * sig * (1.f + g * (1.f - sig));
  }
}

}  // namespace

void RmsNormForward(const float* x, const float* w, float eps, float* y, float* rstd, int64_t rows, int64_t d, cudaStream_t s) {
  if (rows > 0) RmsNormForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, w, eps, y, rstd, d);
}
void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw, int64_t rows,
                     int64_t d, cudaStream_t s) {
  if (rows > 0) RmsNormBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dy, x, w, rstd, dx, dw, d);
}
void Rope(float* qkv, int64_t tokens, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse,
          cudaStream_t s) {
  RopeKernel<<<Blocks(tokens * heads * head_dim), kThreads, 0, s>>>(qkv, tokens, seq_len, heads, head_dim, theta, inverse ? -1.f : 1.f);
}
void SwigluForward(const float* gate_up, float* out, int64_t rows, int64_t f, cudaStream_t s) {
  SwigluForwardKernel<<<Blocks(rows * f), kThreads, 0, s>>>(gate_up, out, rows, f);
}
void SwigluBackward(const float* gate_up, const float* dout, float* dgate_up, int64_t rows, int64_t f, cudaStream_t s) {
  SwigluBackwardKernel<<<Blocks(rows * f), kThreads, 0, s>>>(gate_up, dout, dgate_up, rows, f);
}

}  // namespace moe::kernels::cuda
