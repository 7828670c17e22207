// Where a worker sits: its rack (NVLink domain) and node. From NVML's GPU fabric info when a driver
// is present (clusterUuid.cliqueId names the NVLink domain, as on GB200/GB300 NVL72), else from the
// flags, else from MOE_RACK / MOE_NODE, else "default" and the host name.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

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

// The GPUs the NVIDIA driver lists (NVML), or -1 with the reason in `why`.
int NvmlDeviceCount(std::string* why);

// The devices a node agent serves, from moe-worker's flags: --devices (GPUs: "0-7", "0,2,4",
// "cuda:0,cuda:1" or "all"), --slots N (a CPU node: "cpu" N times) or --device (one). At most one
// of --devices and --slots; --slots only with --device cpu. INVALID_ARGUMENT names the flag.
StatusOr<std::vector<std::string>> ParseDevices(const std::string& device,
                                                const std::string& devices, int slots);

}  // namespace moe::worker
