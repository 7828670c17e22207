// Tensor: a typed, shaped view of device memory, shared by reference.
//
// Every kernel family takes Tensors, so one signature serves the CPU path (fp32, and fp64 for
// gradient checks) and the CUDA path (bf16 activations, fp32 master weights). Views (Rows, Reshape)
// share the storage. Memory comes from a per-device caching allocator, so a training step does not
// go back to the system allocator (or cudaMalloc) for every activation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/check.h"

namespace moe {

enum class DType : uint8_t { kF32, kF64, kBF16, kI32, kI64 };
size_t DTypeSize(DType t);
// The type sums and parameter gradients of a `t` computation are kept in: f32 for bf16, else t.
inline DType AccumType(DType t) { return t == DType::kBF16 ? DType::kF32 : t; }
const char* DTypeName(DType t);

// Storage type for bf16 on the host (the bits of the upper half of an fp32).
struct BFloat16 {
  uint16_t bits;
};

// fp32 -> bf16 with round-to-nearest-even (as __float2bfloat16_rn does); NaN stays a quiet NaN.
inline BFloat16 ToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}
inline float FromBFloat16(BFloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}
template <>
constexpr DType DTypeOf<BFloat16>() {
  return DType::kBF16;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kI64;
}

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  static Device Cpu() { return {}; }
  static Device Cuda(int index) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string ToString() const;
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

// Device memory. A backend registers one per device type (the CUDA one lives in
// kernels/cuda/runtime.cu).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
  virtual void Memset(void* ptr, int value, size_t bytes) = 0;
  // Copies between this device and the host (or within the device).
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyWithin(void* dst, const void* src, size_t bytes) = 0;
  // Bytes held by the cache (allocated from the system, not in use by a tensor).
  virtual size_t CachedBytes() const { return 0; }
};

// An Allocator that keeps freed blocks for reuse (a training step allocates the same sizes every
// time: once warm, it never goes back to the system). Subclasses supply the raw memory of their
// device.
//
// Streams (PyTorch's recordStream as the model): blocks belong to the stream the kernels run on
// (on CUDA the kernels' own stream, kernels/cuda/runtime.cu Stream()). A block another stream also
// uses (an all-to-all on a communication stream, a prefetch) must be recorded with RecordStream
// while it is live; when it is freed, an event is recorded on each such stream and the block is
// reused only once every event has completed. Without that, a block freed on the kernels' stream
// could be handed to the next tensor while the other stream still reads or writes it. The events
// are the subclass's (CUDA events; fakes in tests).
class CachingAllocator : public Allocator {
 public:
  using StreamHandle = void*;  // cudaStream_t on CUDA
  using EventHandle = void*;

  void* Allocate(size_t bytes) override;
  void Free(void* ptr, size_t bytes) override;
  size_t CachedBytes() const override;
  // The live block `ptr` is also used on `stream` (not the default one).
  void RecordStream(void* ptr, StreamHandle stream);
  // Freed blocks still waiting for another stream's work (not reusable yet).
  size_t PendingBlocks() const;
  // Waits for the pending blocks' streams and gives every cached block back to the device
  // (torch.cuda.empty_cache). Live blocks stay. A subclass that owns its memory calls it when it
  // ends.
  void EmptyCache();

 protected:
  virtual void* RawAllocate(size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void RawFree(void* ptr) = 0;
  virtual size_t Granularity() const = 0;  // sizes are rounded up to a multiple of this
  // Stream events (the CPU has no streams: RecordStream is never called there).
  virtual EventHandle RecordEvent(
      StreamHandle stream);                   // an event after the work queued on `stream` so far
  virtual bool EventDone(EventHandle event);  // non-blocking
  virtual void WaitEvent(EventHandle event);  // blocking (out of memory: pending blocks are needed)
  virtual void DestroyEvent(EventHandle event);

 private:
  struct Pending {
    void* ptr;
    size_t size;
    std::vector<EventHandle> events;
  };
  void ReleaseCacheLocked();
  void CollectPendingLocked(bool wait);  // moves blocks whose events completed to the cache
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::map<void*, size_t> sizes_;
  std::map<void*, std::vector<StreamHandle>> streams_;  // live blocks used on other streams
  std::vector<Pending> pending_;
  size_t cached_ = 0;
};

Allocator* GetAllocator(Device device);
void RegisterAllocator(DeviceType type, Allocator* allocator);

class Tensor {
 public:
  static constexpr int kMaxDims = 4;
  using Shape = std::vector<int64_t>;

  Tensor() = default;
  // Uninitialised memory.
  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::Cpu());
  static Tensor Zeros(const Shape& shape, DType dtype, Device device = Device::Cpu());
  // A host tensor holding a copy of `values`.
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const {
    MOE_CHECK(i >= 0 && i < ndim_) << "dim " << i << " of a " << ndim_ << "-d tensor";
    return dims_[static_cast<size_t>(i)];
  }
  Shape shape() const { return Shape(dims_.begin(), dims_.begin() + ndim_); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  std::string ShapeString() const;

  void* raw() const;
  template <typename T>
  T* data() const {
    MOE_CHECK(dtype_ == DTypeOf<T>())
        << "tensor is " << DTypeName(dtype_) << ", asked for " << DTypeName(DTypeOf<T>());
    return static_cast<T*>(raw());
  }

  // A view of rows [begin, end) along dimension 0.
  Tensor Rows(int64_t begin, int64_t end) const;
  // A view with another shape and the same number of elements.
  Tensor Reshape(const Shape& shape) const;
  // A new tensor with a copy of this one's data, on `device`.
  Tensor Clone(Device device) const;
  Tensor Clone() const { return Clone(device_); }
  // Copies src's data into this tensor (same dtype and numel; any devices).
  void CopyFrom(const Tensor& src) const;
  void SetZero() const;
  // This tensor's memory is also used on `stream` (CUDA): its block is reused, once freed, only
  // after the work queued there by then (CachingAllocator::RecordStream). Nothing on the CPU.
  void RecordStream(void* stream) const;
  // Host copy of the data as a vector (any device).
  template <typename T>
  std::vector<T> ToVector() const;

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  DType dtype_ = DType::kF32;
  Device device_;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> dims_{};
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, const Shape& shape) {
  Tensor t = Empty(shape, DTypeOf<T>(), Device::Cpu());
  MOE_CHECK_EQ(static_cast<size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  MOE_CHECK(dtype_ == DTypeOf<T>()) << "ToVector of a " << DTypeName(dtype_) << " tensor";
  std::vector<T> out(static_cast<size_t>(numel()));
  if (device_.is_cpu()) {
    std::copy(data<T>(), data<T>() + numel(), out.begin());
  } else {
    GetAllocator(device_)->CopyToHost(out.data(), raw(), nbytes());
  }
  return out;
}

}  // namespace moe
