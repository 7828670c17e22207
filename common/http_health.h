// What a service's HTTP port answers beside /metrics: GET /healthz (alive: the process serves and
// is not stopping) and GET /readyz (ready: it can take work, e.g. the agent is registered with its
// controller), 200 with "ok" or 503 with the reason as text; the probes Kubernetes' kubelet and
// Slurm's health checks call. And the process_* series every Prometheus client library exports
// (the Go and Python clients' names), read from /proc/self at each scrape.
//
// ServeHealthAndMetrics puts the probes and /metrics on our own HTTP server (common/http_server.h:
// one event thread, deadlines and connection caps, so slow clients cannot fail the probes). The
// probes are process-wide: a service has one such port.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/http_server.h"
#include "common/status.h"

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

// Binds `listen` and serves GET /healthz and /readyz (from the probes), and /metrics: the families
// of `collectables` (in this order; expired ones skipped), collected at each request and written
// in Prometheus' text format 0.0.4. Errors say why the address cannot be served (e.g. "address
// already in use"); the caller names its flag.
StatusOr<std::unique_ptr<HttpServer>> ServeHealthAndMetrics(
    const std::string& listen, std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
    HttpServerOptions options = {});

// A Collectable whose families come from `collect` at each scrape (gauges of live state, with no
// thread to keep them current).
std::shared_ptr<prometheus::Collectable> CollectorOf(
    std::function<std::vector<prometheus::MetricFamily>()> collect);

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds, process_threads: this process's,
// from /proc/self (families missing where /proc cannot be read).
std::shared_ptr<prometheus::Collectable> ProcessCollector();

}  // namespace moe
