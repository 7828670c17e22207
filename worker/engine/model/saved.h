// What a layer's Forward keeps for its Backward, one entry per micro-batch in flight. A pipeline
// schedule runs several forwards before their backwards, in the same order on each layer (1F1B and
// its interleaved form both), so the entries form a FIFO queue.
//
// Forward-only passes (evaluation, the loss in gradient checks) keep nothing: NoGradScope, like
// torch.no_grad(), turns saving off for the calling thread.
#pragma once

#include <deque>
#include <utility>

#include "common/check.h"

namespace moe::model {

// Whether forwards on this thread keep what their backward needs (default: yes).
bool GradEnabled();

class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  bool previous_;
};

template <typename S>
class SavedQueue {
 public:
  void Push(S s) {
    if (GradEnabled()) q_.push_back(std::move(s));
  }
  // The oldest forward's entry: backward runs in forward order.
  S Pop() {
    MOE_CHECK(!q_.empty()) << "a backward without its forward";
    S s = std::move(q_.front());
    q_.pop_front();
    return s;
  }
  size_t size() const { return q_.size(); }
  void Clear() { q_.clear(); }

 private:
  std::deque<S> q_;
};

}  // namespace moe::model
