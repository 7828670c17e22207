// Where a worker sits: its rack (NVLink domain) and node. From NVML's GPU fabric info when a driver
// is present (clusterUuid.cliqueId names the NVLink domain, as on GB200/GB300 NVL72), else from the
// flags, else from MOE_RACK / MOE_NODE, else "default" and the host name.
#pragma once

#include <string>

namespace moe::worker {

struct Topology {
  std::string rack;
  std::string node;
  std::string source;  // how the rack was found
};

Topology DetectTopology(const std::string& device, const std::string& rack_flag,
                        const std::string& node_flag);

// NVML's fabric identity of GPU `index` ("<clusterUuid hex>.<cliqueId>"), or "" with the reason in
// `why` (no driver, no fabric, not completed). libnvidia-ml is loaded with dlopen: no link
// dependency.
std::string NvmlFabricDomain(int index, std::string* why);

}  // namespace moe::worker
