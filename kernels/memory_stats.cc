#include "kernels/memory_stats.h"

#include <atomic>
#include <mutex>

namespace moe {
namespace {

std::atomic<MemoryCategory> g_category{MemoryCategory::kOther};

struct Counters {
  std::mutex mu;
  MemoryUsage usage;
};

Counters& CountersOf(int device_type) {
  static Counters counters[2];
  return counters[device_type == 0 ? 0 : 1];
}

}  // namespace

const char* MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kWeights:
      return "weights";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizer:
      return "optimizer";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kCommunication:
      return "communication";
    case MemoryCategory::kOther:
    case MemoryCategory::kCount:
      break;
  }
  return "other";
}

int64_t MemoryUsage::total() const {
  int64_t t = 0;
  for (int64_t b : current) t += b;
  return t;
}

MemoryScope::MemoryScope(MemoryCategory c) : previous_(g_category.exchange(c)) {}
MemoryScope::~MemoryScope() { g_category.store(previous_); }

MemoryCategory CurrentMemoryCategory() { return g_category.load(); }

MemoryUsage GetMemoryUsage(int device_type) {
  Counters& c = CountersOf(device_type);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.usage;
}

void ResetPeakMemory(int device_type) {
  Counters& c = CountersOf(device_type);
  std::lock_guard<std::mutex> lock(c.mu);
  c.usage.peak = c.usage.total();
  c.usage.at_peak = c.usage.current;
}

void RecordAllocation(int device_type, MemoryCategory cat, int64_t bytes) {
  Counters& c = CountersOf(device_type);
  std::lock_guard<std::mutex> lock(c.mu);
  c.usage.current[static_cast<size_t>(cat)] += bytes;
  const int64_t total = c.usage.total();
  if (total > c.usage.peak) {
    c.usage.peak = total;
    c.usage.at_peak = c.usage.current;
  }
}

void RecordFree(int device_type, MemoryCategory cat, int64_t bytes) {
  Counters& c = CountersOf(device_type);
  std::lock_guard<std::mutex> lock(c.mu);
  c.usage.current[static_cast<size_t>(cat)] -= bytes;
}

}  // namespace moe
