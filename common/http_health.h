// What a service's HTTP port answers beside /metrics: GET /healthz (alive: the process serves and
// is not stopping) and GET /readyz (ready: it can take work, e.g. the agent is registered with its
// controller), 200 with "ok" or 503 with the reason as text; the probes Kubernetes' kubelet and
// Slurm's health checks call. And the process_* series every Prometheus client library exports
// (the Go and Python clients' names), read from /proc/self at each scrape.
//
// Both ride on prometheus::Exposer's civetweb server: HealthCallbacks() goes to its constructor and
// answers the two paths before civetweb's own handlers see them. The probes are process-wide
// (civetweb's request callback carries no user data of ours: CivetServer keeps it for itself).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

struct CivetCallbacks;

namespace moe {

struct ProbeAnswer {
  bool ok = true;
  std::string detail;  // why not, when !ok (the 503's body); "ok" otherwise
};

struct HealthProbes {
  std::function<ProbeAnswer()> live;   // unset: alive while the process serves
  std::function<ProbeAnswer()> ready;  // unset: ready when alive
};

// Installs the probes (thread-safe; a later call replaces them, e.g. as the process stops).
void SetHealthProbes(HealthProbes probes);

// Callbacks for prometheus::Exposer's constructor: /healthz and /readyz answered from the probes,
// every other path left to the exposer (/metrics).
const CivetCallbacks* HealthCallbacks();

// A Collectable whose families come from `collect` at each scrape (gauges of live state, with no
// thread to keep them current).
std::shared_ptr<prometheus::Collectable> CollectorOf(
    std::function<std::vector<prometheus::MetricFamily>()> collect);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds, process_threads: this process's,
// from /proc/self (families missing where /proc cannot be read).
std::shared_ptr<prometheus::Collectable> ProcessCollector();

}  // namespace moe
