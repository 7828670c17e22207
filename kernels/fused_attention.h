// cuDNN's fused attention (SDPA) as the CUDA attention path calls it: declared here, with no cuDNN
// or CUDA types, so that kernels/cuda/attention.cu reaches it without an include into the Hopper
// folder; defined in kernels/cuda/sm90a/cudnn_attention.cc, built only where configure found the
// cuDNN frontend's headers (MOE_WITH_SM90A).
#pragma once

#include <cstdint>
#include <string>

namespace moe::kernels::cuda::sm90a {

// An attention problem in the layout the engine keeps q, k, v and o in: [batch, seq, heads, dim]
// (BSHD), bf16, fp32 softmax statistics [batch, heads, seq] (the natural log-sum-exp of each row's
// scaled scores, as AttentionForward's lse). MLA: qk_dim 192, v_dim 128; plain MHA: both the head
// dim. scale 0: 1/sqrt(qk_dim).
struct SdpaShape {
  int64_t batch = 1, heads = 1, seq = 1, qk_dim = 64, v_dim = 64;
  bool causal = true;
  float scale = 0;
  bool deterministic = false;  // the backward without atomics (cuDNN's deterministic algorithm)
};

// The device buffers of one call (forward: q, k, v in, o and stats out; backward: also d_o in, dq,
// dk, dv out).
struct SdpaBuffers {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *d_o = nullptr;
  void *o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const float* stats_in = nullptr;  // the backward's
  float* stats = nullptr;           // the forward's
};

// Runs cuDNN's SDPA forward (backward) for `s` on `stream` (a cudaStream_t) of the current device.
// The graphs are built once per shape and kept; their workspace comes from the caching allocator.
// "" when it ran; else why not, and nothing was launched: the caller runs its own kernels.
// The backward in the deterministic mode runs on cuDNN only where its workspace stays within 1 GiB
// (else ours, deterministic too); the forward is not affected.
std::string SdpaForward(const SdpaShape& s, const SdpaBuffers& b, void* stream);
std::string SdpaBackward(const SdpaShape& s, const SdpaBuffers& b, void* stream);
// Calls that ran on cuDNN so far (both directions): the checks that must see this path run.
int64_t SdpaRuns();

}  // namespace moe::kernels::cuda::sm90a
