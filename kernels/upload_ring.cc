#include "kernels/upload_ring.h"

#include <cstring>

#include "common/check.h"
#include "kernels/runtime.h"

namespace moe::kernels {

UploadRing::UploadRing(size_t capacity, Hooks hooks)
    : capacity_(capacity), hooks_(std::move(hooks)) {
  MOE_CHECK(capacity_ >= 2 * kAlign && capacity_ % kAlign == 0)
      << "UploadRing: capacity " << capacity_ << " is not a multiple of " << kAlign
      << " (at least two)";
}

UploadRing::~UploadRing() {
  Drain();
  if (base_ != nullptr) hooks_.free_pinned(base_);
}

void UploadRing::RetireDoneLocked() {
  while (!regions_.empty() && hooks_.event_done(regions_.front().event)) {
    hooks_.destroy_event(regions_.front().event);
    regions_.pop_front();
  }
}

void UploadRing::WaitOldestLocked() {
  hooks_.wait_event(regions_.front().event);
  hooks_.destroy_event(regions_.front().event);
  regions_.pop_front();
}

bool UploadRing::OverlapsLocked(size_t begin, size_t end) const {
  for (const Region& r : regions_) {
    if (r.begin < end && begin < r.end) return true;
  }
  return false;
}

size_t UploadRing::ReserveLocked(size_t bytes) {
  RetireDoneLocked();
  size_t begin = head_ + bytes <= capacity_ ? head_ : 0;
  bool waited = false;
  // The regions in the way are the oldest (the ring fills in order); the stream frees them in
  // order.
  while (OverlapsLocked(begin, begin + bytes)) {
    WaitOldestLocked();
    waited = true;
  }
  if (waited) {
    ++waits_;
    CountHostSync();
  }
  return begin;
}

bool UploadRing::Upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return true;
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(mu_);
  if (padded > capacity_ / 2 || unavailable_) return false;
  if (base_ == nullptr) {
    base_ = static_cast<char*>(hooks_.alloc_pinned(capacity_));
    if (base_ == nullptr) {
      unavailable_ = true;
      return false;
    }
  }
  const size_t begin = ReserveLocked(padded);
  std::memcpy(base_ + begin, src, bytes);
  hooks_.copy_async(dst, base_ + begin, bytes);
  regions_.push_back({begin, begin + padded, hooks_.record_event()});
  head_ = begin + padded;
  ++uploads_;
  return true;
}

void UploadRing::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  while (!regions_.empty()) WaitOldestLocked();
}

int64_t UploadRing::uploads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploads_;
}

int64_t UploadRing::waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

size_t UploadRing::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

}  // namespace moe::kernels
