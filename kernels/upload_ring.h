// Host-to-device uploads without waiting for the device: each upload copies its bytes into the next
// free region of a ring of pinned host memory and queues an asynchronous copy from there on the
// stream the kernels run on, followed by an event. The host waits only when the ring has wrapped
// round onto a region whose copy the stream has not done yet (counted as a host sync,
// kernels/runtime.h).
//
// A synchronous cudaMemcpy from pageable memory waits for everything queued before it, so the
// step's small uploads (a micro-batch's tokens and targets, a regrouping permutation, the bias
// steps) each stalled the host until the device caught up. Through the ring they queue behind the
// kernels instead, like PyTorch's `tensor.to(device, non_blocking=True)` from a pinned buffer. The
// copy reads the staged bytes, not the caller's, so the caller may free or reuse its buffer at
// once.
//
// The device side comes in through Hooks (CUDA calls in kernels/cuda/runtime.cu; a fake stream in
// tests/kernels/upload_ring_test.cc), so the logic is tested on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace moe::kernels {

class UploadRing {
 public:
  using Event = void*;
  struct Hooks {
    std::function<void*(size_t)> alloc_pinned;  // nullptr when pinned memory cannot be had
    std::function<void(void*)> free_pinned;
    // Queues the copy of `bytes` from `staged` (in the ring) to device address `dst` on the stream.
    std::function<void(void* dst, const void* staged, size_t bytes)> copy_async;
    std::function<Event()> record_event;    // after the work queued on the stream so far
    std::function<bool(Event)> event_done;  // non-blocking
    std::function<void(Event)> wait_event;  // blocking
    std::function<void(Event)> destroy_event;
  };

  // `capacity` bytes of pinned memory, allocated at the first upload.
  UploadRing(size_t capacity, Hooks hooks);
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  // Stages and queues the copy; false (nothing done) when `bytes` exceeds half the capacity or no
  // pinned memory could be had: the caller then copies synchronously.
  bool Upload(void* dst, const void* src, size_t bytes);
  // Waits for every queued copy (the ring is then empty).
  void Drain();

  size_t capacity() const { return capacity_; }
  int64_t uploads() const;   // staged so far
  int64_t waits() const;     // of them, those that waited for the stream to free their region
  size_t in_flight() const;  // regions whose copy may not have run yet

  static constexpr size_t kAlign = 256;

 private:
  struct Region {
    size_t begin, end;
    Event event;
  };
  // The offset of `bytes` free bytes, retiring (or waiting for) the oldest regions in their way.
  size_t ReserveLocked(size_t bytes);
  void RetireDoneLocked();
  void WaitOldestLocked();  // waits for the oldest region's copy and frees the region
  bool OverlapsLocked(size_t begin, size_t end) const;

  const size_t capacity_;
  Hooks hooks_;
  mutable std::mutex mu_;
  char* base_ = nullptr;
  bool unavailable_ = false;    // pinned memory was refused: every upload falls back
  size_t head_ = 0;             // where the next region starts
  std::deque<Region> regions_;  // queued copies, oldest first (one stream: they finish in order)
  int64_t uploads_ = 0, waits_ = 0;
};

}  // namespace moe::kernels
