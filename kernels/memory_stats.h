// What the engine's tensors hold, by category: every Tensor storage is counted under the category
// in force when it was allocated (MemoryScope), on its device type, until it is freed. The peak is
// the largest total since ResetPeakMemory, with each category's share at that moment: what a
// device's memory must hold, not counting the allocator's cache (Allocator::CachedBytes) and the
// libraries' workspaces (cuBLAS, NCCL).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace moe {

enum class MemoryCategory : uint8_t {
  kOther = 0,      // constants (rope tables), staging; whatever no scope names
  kWeights,        // master weights and their compute copies
  kGradients,      // gradient buffers
  kOptimizer,      // AdamW moments
  kActivations,    // what the forward keeps for the backward, and the step's temporaries
  kCommunication,  // all-to-all dispatch buffers and point-to-point staging
  kCount,
};
constexpr size_t kNumMemoryCategories = static_cast<size_t>(MemoryCategory::kCount);

// "weights", "gradients", ... (the metrics' and --describe's names).
const char* MemoryCategoryName(MemoryCategory c);

struct MemoryUsage {
  std::array<int64_t, kNumMemoryCategories> current{};  // bytes live now, per category
  std::array<int64_t, kNumMemoryCategories> at_peak{};  // per category when the total peaked
  int64_t peak = 0;                                     // the largest total since the last reset
  int64_t total() const;
};

// Sets the category of the allocations made while it lives (process-wide: the engine allocates from
// one thread, or from kernel threads inside a scope the calling thread set). Scopes nest.
class MemoryScope {
 public:
  explicit MemoryScope(MemoryCategory c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryCategory previous_;
};

MemoryCategory CurrentMemoryCategory();
// Counters of one device type (0: host, 1: CUDA).
MemoryUsage GetMemoryUsage(int device_type);
// Starts a new peak from what is live now.
void ResetPeakMemory(int device_type);

// Called by Tensor storage.
void RecordAllocation(int device_type, MemoryCategory c, int64_t bytes);
void RecordFree(int device_type, MemoryCategory c, int64_t bytes);

}  // namespace moe
