#include "kernels/kernel_state.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe::kernels {
namespace {

std::atomic<int64_t> g_host_syncs{0};
std::atomic<bool> g_reproducible_cpu_gemm{false};
std::atomic<bool> g_deterministic_kernels{false};

std::atomic<AttentionKernels>& AttentionSlot() {
  static std::atomic<AttentionKernels> which{[] {
    const char* env = std::getenv("MOE_ATTENTION");
    if (env != nullptr && std::strcmp(env, "ours") == 0) return AttentionKernels::kOurs;
    if (env != nullptr && *env != '\0' && std::strcmp(env, "auto") != 0)
      std::fprintf(stderr, "MOE_ATTENTION=%s: not auto or ours; auto (cuDNN where it runs)\n", env);
    return AttentionKernels::kAuto;
  }()};
  return which;
}

std::atomic<GroupedGemmMode>& ModeSlot() {
  static std::atomic<GroupedGemmMode> mode{[] {
    const char* env = std::getenv("MOE_GROUPED_GEMM");
    if (env != nullptr && std::strcmp(env, "loop") == 0) return GroupedGemmMode::kLoop;
    if (env != nullptr && std::strcmp(env, "grouped") == 0) return GroupedGemmMode::kGrouped;
    if (env != nullptr && std::strcmp(env, "cutlass") == 0) return GroupedGemmMode::kCutlass;
    return GroupedGemmMode::kAuto;
  }()};
  return mode;
}

}  // namespace

void CountHostSync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }
int64_t HostSyncs() { return g_host_syncs.load(std::memory_order_relaxed); }

void SetDeterministicKernels(bool on) { g_deterministic_kernels.store(on); }
bool DeterministicKernels() { return g_deterministic_kernels.load(); }
void SetAttentionKernels(AttentionKernels which) { AttentionSlot().store(which); }
AttentionKernels GetAttentionKernels() { return AttentionSlot().load(); }
void SetGroupedGemmMode(GroupedGemmMode mode) { ModeSlot().store(mode); }
GroupedGemmMode GetGroupedGemmMode() { return ModeSlot().load(); }
void SetReproducibleCpuGemm(bool on) { g_reproducible_cpu_gemm.store(on); }
bool ReproducibleCpuGemm() { return g_reproducible_cpu_gemm.load(); }

}  // namespace moe::kernels
