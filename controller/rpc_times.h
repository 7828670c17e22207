// The controller's own time for each unary RPC: moe_rpc_duration_seconds{method}, from the
// handler's entry to its answer (authentication, the executor's queue and any wait for the store
// included; the network, gRPC's transport and the client not). What an operator reads as the
// controller's latency beside the clients' own, and what bench/load.py separates from its Python
// clients' time. Streams (Connect, WatchJob) and RendezvousWait, which wait by design, are not
// timed.
//
// Threads: Count before the server starts; Start and RpcTimer::Done from any thread after.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
class Histogram;
}  // namespace prometheus

namespace moe::controller {

// One call's clock: Done() observes the time since it was made. A value (it travels in the
// std::function of an executor's task or a callback): call Done on one copy, once.
class RpcTimer {
 public:
  explicit RpcTimer(prometheus::Histogram* h) : h_(h), t0_(std::chrono::steady_clock::now()) {}
  void Done();

 private:
  prometheus::Histogram* h_;
  std::chrono::steady_clock::time_point t0_;
};

class RpcTimes {
 public:
  // The unary methods timed, as the proto names them.
  static constexpr std::string_view kMethods[] = {
      "SubmitJob",   "GetJob",       "ListJobs",      "CancelJob",     "DeleteJob",
      "ListWorkers", "ListQueues",   "ListRacks",     "DrainWorker",   "UndrainWorker",
      "GetLogs",     "DeleteWorker", "RendezvousSet", "RendezvousGet", "Bootstrap",
      "DeleteNode",  "DeleteWorkers"};
  // Registers the histogram family in `registry` (before the server starts; without it nothing is
  // timed).
  void Count(prometheus::Registry& registry);
  // A clock for one call of `method` (one of kMethods; another name times nothing).
  RpcTimer Start(std::string_view method) const;

 private:
  std::map<std::string, prometheus::Histogram*, std::less<>> by_method_;
};

}  // namespace moe::controller
