// Process-wide kernel state that both backends read or count into: the host-sync counter and the
// grouped-GEMM mode. Below the families and the backends (kernels/kernel_types.h has the types).
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"

namespace moe::kernels {

// Host synchronisations: every point where the host waits for the device (a device-to-host copy, a
// kernel that returns a host value, a device synchronisation, a collective that waits for its
// stream). The CUDA path counts its own; the engine counts the same points on the CPU stand-in,
// where nothing waits, so a CPU test can hold the step to its budget (docs/architecture.md, "Host
// syncs").
void CountHostSync();
int64_t HostSyncs();

void SetGroupedGemmMode(GroupedGemmMode mode);
GroupedGemmMode GetGroupedGemmMode();

// Reproducible CPU GEMMs: every element of C is the same sum in the same order whatever the
// matrix's size, the element's position in it and the thread count (the built-in blocked GEMM;
// OpenBLAS picks kernels and splits by all three, so a token's expert output would depend on how
// many other tokens share its expert's GEMM). Deterministic training turns it on. Off by default.
void SetReproducibleCpuGemm(bool on);
bool ReproducibleCpuGemm();

// Deterministic GPU algorithms where a library offers a faster one that is not (cuDNN's attention
// backward adds dQ with atomics unless asked not to). Deterministic training turns it on.
void SetDeterministicKernels(bool on);
bool DeterministicKernels();

// Which attention kernels the CUDA path runs for bf16: cuDNN's fused SDPA where cuDNN takes the
// shape (the default), else ours; or ours always (MOE_ATTENTION=ours in the environment: the
// reference, and the fallback).
enum class AttentionKernels { kAuto, kOurs };
void SetAttentionKernels(AttentionKernels which);
AttentionKernels GetAttentionKernels();

}  // namespace moe::kernels
