#include "controller/rpc_times.h"

#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace moe::controller {

void RpcTimer::Done() {
  if (h_ == nullptr) return;
  h_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  h_ = nullptr;  // this copy is spent
}

void RpcTimes::Count(prometheus::Registry& registry) {
  auto& family = prometheus::BuildHistogram()
                     .Name("moe_rpc_duration_seconds")
                     .Help(
                         "The controller's own time for a unary RPC, entry to answer (queue and "
                         "store waits included; not the network or the client)")
                     .Register(registry);
  // From half a millisecond (a read from memory) to ten seconds (a commit behind a stalled disk).
  const prometheus::Histogram::BucketBoundaries bounds = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};
  for (std::string_view m : kMethods) {
    by_method_[std::string(m)] = &family.Add({{"method", std::string(m)}}, bounds);
  }
}

RpcTimer RpcTimes::Start(std::string_view method) const {
  auto it = by_method_.find(method);
  return RpcTimer(it == by_method_.end() ? nullptr : it->second);
}

}  // namespace moe::controller
