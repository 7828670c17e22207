// RoPE (half-split) on the q and k parts of qkv [T, 3*H*d], in place; the backward is the inverse
// rotation. Angles in double, as the CPU's table is.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moe::kernels::cuda {
namespace {

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

void Rope(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta, bool inverse, const char* op) {
  CheckOnCuda({&qkv}, op);
  const int64_t tokens = qkv.dim(0);
  MOE_CUDA_TYPED(StorageType({&qkv}, op), T, {
    if (tokens > 0) {
      RopeKernel<T><<<Blocks(tokens * heads * head_dim), kThreads, 0, Stream()>>>(Ptr<T>(qkv), tokens, seq_len, heads, head_dim,
                                                                                  theta, inverse ? -1.f : 1.f);
    }
  });
  CheckLaunch(op);
}

}  // namespace

void RopeForward(const Tensor& qkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  Rope(qkv, seq_len, heads, head_dim, theta, false, "RopeForward");
}

void RopeBackward(const Tensor& dqkv, int64_t seq_len, int64_t heads, int64_t head_dim, double theta) {
  Rope(dqkv, seq_len, heads, head_dim, theta, true, "RopeBackward");
}

}  // namespace moe::kernels::cuda
