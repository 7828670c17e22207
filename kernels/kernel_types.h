// The value types and constants in the kernel families' signatures (configs, layouts, modes, flag
// bits): below the families (kernels/<family>.h) and both backends (kernels/cpu/, kernels/cuda/),
// so a backend takes them from here and never includes a family header.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define MOE_HOST_DEVICE __host__ __device__
#else
#define MOE_HOST_DEVICE
#endif

namespace moe::kernels {

// The i-th value of FillUniform's sequence from `seed` (kernels/elementwise.h), uniform in [-1, 1)
// on a 2^-23 grid: a counter-based hash (SplitMix64's finaliser) of (seed, i), so every element of
// every tensor is its own draw, the same on the CPU and on a GPU, and no state travels.
MOE_HOST_DEVICE inline float UniformAt(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
}

// RoPE (kernels/rope.h): which columns of a head rotate together.
enum class RopeLayout { kHalfSplit, kPairs };

// The router (kernels/router.h).
struct RouterConfig {
  int64_t top_k = 1;
  int64_t num_groups = 1;   // expert groups; 1 turns group-limited routing off
  int64_t topk_groups = 1;  // groups kept per token
  bool sigmoid = true;      // sigmoid scores (normalised over the chosen k) or softmax scores
  double route_scale = 1.0;
  bool use_bias = true;  // selection uses score + bias; group scores then sum each group's top two
};

// AdamW (kernels/optimizer.h).
// Global-norm clipping's gradient scale from the squared norms of the dense and the expert
// gradients: norm = sqrt(sum) (rounded to fp32 when norm_fp32: deterministic training), then
// grad_clip / (norm + 1e-6) when grad_clip > 0 and norm > grad_clip, else 1; NaN when the norm is
// not finite (the update is skipped). The AdamW kernels of both devices compute it
// (Optimizer::StepWithDeviceNorm).
MOE_HOST_DEVICE inline double ClipScale(double dense_sq, double expert_sq, double grad_clip,
                                        bool norm_fp32) {
  double norm = sqrt(dense_sq + expert_sq);
  if (norm_fp32) norm = static_cast<double>(static_cast<float>(norm));
  if (!(norm - norm == 0)) return norm - norm;  // inf - inf and NaN - NaN are NaN
  return grad_clip > 0 && norm > grad_clip ? grad_clip / (norm + 1e-6) : 1.0;
}

// Elements of a flat bucket one CUDA block of the bucket's AdamW updates at most
// (kernels/optimizer.h AdamWMulti: its launch table cuts the segments into chunks of this many).
constexpr int64_t kAdamWChunkElements = 4096;

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
  double grad_scale = 1.0;    // multiplies the gradient first (global-norm clipping)
  // Clipping without a host read of the norm: when set, three f64 on the parameters' device: the
  // squared global norms of the dense and the expert gradients, and a skip word; the kernel takes
  // its gradient scale from ClipScale(norm_sq[0], norm_sq[1], grad_clip, norm_fp32) and grad_scale
  // is ignored. A non-finite norm or a non-zero skip word (a batch with out-of-range indices on
  // some rank) leaves the parameters and moments unchanged.
  const double* norm_sq = nullptr;
  double grad_clip = 0;
  bool norm_fp32 = false;
};

// How the CUDA path runs a grouped GEMM (kernels/cuda/gemm.cu): by rows per expert (auto: one
// cublasGemmGroupedBatchedEx call below 128 rows per expert, else a call per expert), or forced;
// kCutlass: the forward through CUTLASS's Hopper grouped GEMM where it takes the call (bf16, sm_90,
// widths multiples of 8; else as auto), the backward as auto. The environment's
// MOE_GROUPED_GEMM=loop|grouped|cutlass sets the starting mode; the CPU ignores it.
enum class GroupedGemmMode { kAuto, kLoop, kGrouped, kCutlass };
// Device-side bounds checks: the CUDA kernels that index with data (the embedding's token ids, the
// loss's targets, row gathers and scatters) record out-of-range indices as these bits instead of
// reading there; the step fails at its end with BadIndexMessage (kernels/elementwise.h
// FoldBadIndices). The CPU kernels check the same indices with MOE_CHECK.
enum BadIndexKind : unsigned { kBadTokenId = 1, kBadTarget = 2, kBadRowIndex = 4, kBadExpert = 8 };

}  // namespace moe::kernels
