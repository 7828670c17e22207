#include "kernels/tensor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "common/log.h"
#include "kernels/memory_stats.h"

namespace moe {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "?";
}

std::string Device::ToString() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

namespace {

// Host memory. Large mallocs go to mmap and come back zero-filled by page faults on every use; the
// cache removes that cost after the first step.
class CpuCachingAllocator final : public CachingAllocator {
 public:
  void Memset(void* ptr, int value, size_t bytes) override { std::memset(ptr, value, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyFromHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyWithin(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

 protected:
  // Blocks of 2 MiB and more are 2 MiB-aligned and asked to be backed by transparent huge pages:
  // one page fault per 2 MiB instead of 512 (zeroing a rank's optimizer state at start-up was
  // mostly page faults on a virtual machine). Where THP is off, madvise is a no-op.
  void* RawAllocate(size_t bytes) override {
    constexpr size_t kHuge = size_t{2} << 20;
    if (bytes < kHuge) return std::aligned_alloc(64, bytes);
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
#ifdef MADV_HUGEPAGE
    if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
  }
  void RawFree(void* ptr) override { std::free(ptr); }
  size_t Granularity() const override { return 64; }
};

Allocator* g_allocators[2] = {nullptr, nullptr};

}  // namespace

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t g = Granularity();
  const size_t size = bytes == 0 ? g : (bytes + g - 1) / g * g;
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty()) CollectPendingLocked(/*wait=*/false);
  auto it = free_.lower_bound(size);
  // Reuse a block at most twice the size asked for, so small tensors don't pin big blocks.
  if (it != free_.end() && it->first <= 2 * size) {
    void* p = it->second;
    cached_ -= it->first;
    sizes_[p] = it->first;
    free_.erase(it);
    return p;
  }
  void* p = RawAllocate(size);
  if (p == nullptr) {  // give the cache back (pending blocks once their streams are done) and try
                       // once more
    CollectPendingLocked(/*wait=*/true);
    ReleaseCacheLocked();
    p = RawAllocate(size);
  }
  if (p == nullptr) {  // the trainer turns it into a permanent failure at initialisation
    MOE_LOG(ERROR) << "out of memory allocating " << size << " bytes (" << cached_ << " cached)";
    throw std::bad_alloc();
  }
  sizes_[p] = size;
  return p;
}

void CachingAllocator::Free(void* ptr, size_t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(ptr);
  MOE_CHECK(it != sizes_.end()) << "free of an unknown block";
  const size_t size = it->second;
  sizes_.erase(it);
  if (auto used = streams_.find(ptr); used != streams_.end()) {
    Pending p{ptr, size, {}};
    for (StreamHandle s : used->second) p.events.push_back(RecordEvent(s));
    streams_.erase(used);
    pending_.push_back(std::move(p));
    return;
  }
  free_.emplace(size, ptr);
  cached_ += size;
}

void CachingAllocator::RecordStream(void* ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mu_);
  MOE_CHECK(sizes_.count(ptr) > 0) << "RecordStream of a block that is not live";
  std::vector<StreamHandle>& s = streams_[ptr];
  if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
}

size_t CachingAllocator::PendingBlocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

void CachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  CollectPendingLocked(/*wait=*/true);
  ReleaseCacheLocked();
}

void CachingAllocator::CollectPendingLocked(bool wait) {
  std::erase_if(pending_, [&](Pending& p) {
    for (EventHandle e : p.events) {
      if (wait)
        WaitEvent(e);
      else if (!EventDone(e))
        return false;
    }
    for (EventHandle e : p.events) DestroyEvent(e);
    free_.emplace(p.size, p.ptr);
    cached_ += p.size;
    return true;
  });
}

CachingAllocator::EventHandle CachingAllocator::RecordEvent(StreamHandle) {
  MOE_CHECK(false) << "this device has no streams";
  return nullptr;
}
bool CachingAllocator::EventDone(EventHandle) { return true; }
void CachingAllocator::WaitEvent(EventHandle) {}
void CachingAllocator::DestroyEvent(EventHandle) {}

size_t CachingAllocator::CachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

void CachingAllocator::ReleaseCacheLocked() {
  for (auto& [size, p] : free_) RawFree(p);
  free_.clear();
  cached_ = 0;
}

Allocator* GetAllocator(Device device) {
  if (device.is_cpu()) {
    static CpuCachingAllocator* cpu = new CpuCachingAllocator();  // lives for the process
    return cpu;
  }
  Allocator* a = g_allocators[static_cast<int>(device.type)];
  MOE_CHECK(a != nullptr) << "no allocator for " << device.ToString() << " (built without CUDA?)";
  return a;
}

void RegisterAllocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

struct Tensor::Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  MemoryCategory category = MemoryCategory::kOther;
  ~Storage() {
    if (ptr == nullptr) return;
    GetAllocator(device)->Free(ptr, bytes);
    RecordFree(static_cast<int>(device.type), category, static_cast<int64_t>(bytes));
  }
};

void Tensor::RecordStream(void* stream) const {
  if (!defined() || device_.is_cpu() || storage_->ptr == nullptr) return;
  if (auto* caching = dynamic_cast<CachingAllocator*>(GetAllocator(device_)); caching != nullptr) {
    caching->RecordStream(storage_->ptr, stream);
  }
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  MOE_CHECK(!shape.empty() && shape.size() <= kMaxDims)
      << "tensors have 1 to " << kMaxDims << " dims";
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.ndim_ = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    MOE_CHECK(shape[i] >= 0) << "negative dimension";
    t.dims_[i] = shape[i];
  }
  t.storage_ = std::make_shared<Storage>();
  t.storage_->device = device;
  t.storage_->bytes = t.nbytes();
  t.storage_->ptr = GetAllocator(device)->Allocate(t.storage_->bytes);
  t.storage_->category = CurrentMemoryCategory();
  RecordAllocation(static_cast<int>(device.type), t.storage_->category,
                   static_cast<int64_t>(t.storage_->bytes));
  return t;
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  t.SetZero();
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[static_cast<size_t>(i)];
  return ndim_ == 0 ? 0 : n;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i)
    s += (i ? ", " : "") + std::to_string(dims_[static_cast<size_t>(i)]);
  return s + "]";
}

void* Tensor::raw() const {
  MOE_CHECK(storage_ != nullptr) << "use of an undefined tensor";
  return static_cast<char*>(storage_->ptr) + offset_;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  MOE_CHECK(ndim_ >= 1 && begin >= 0 && begin <= end && end <= dims_[0])
      << "Rows(" << begin << ", " << end << ") of " << ShapeString();
  Tensor t = *this;
  const int64_t row_elems = dims_[0] == 0 ? 0 : numel() / dims_[0];
  t.offset_ += static_cast<size_t>(begin * row_elems) * DTypeSize(dtype_);
  t.dims_[0] = end - begin;
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  MOE_CHECK(n == numel() && !shape.empty() && shape.size() <= kMaxDims)
      << "cannot reshape " << ShapeString() << " to " << shape.size() << " dims of " << n
      << " elements";
  Tensor t = *this;
  t.ndim_ = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.dims_[i] = shape[i];
  return t;
}

Tensor Tensor::Clone(Device device) const {
  Tensor t = Empty(shape(), dtype_, device);
  t.CopyFrom(*this);
  return t;
}

void Tensor::CopyFrom(const Tensor& src) const {
  MOE_CHECK(src.dtype_ == dtype_ && src.numel() == numel())
      << "copy of " << DTypeName(src.dtype_) << src.ShapeString() << " into " << DTypeName(dtype_)
      << ShapeString();
  if (numel() == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memmove(raw(), src.raw(), nbytes());
  } else if (device_.is_cpu()) {
    GetAllocator(src.device_)->CopyToHost(raw(), src.raw(), nbytes());
  } else if (src.device_.is_cpu()) {
    GetAllocator(device_)->CopyFromHost(raw(), src.raw(), nbytes());
  } else {
    GetAllocator(device_)->CopyWithin(raw(), src.raw(), nbytes());
  }
}

void Tensor::SetZero() const {
  if (numel() > 0) GetAllocator(device_)->Memset(raw(), 0, nbytes());
}

}  // namespace moe
