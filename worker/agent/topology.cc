#include "worker/agent/topology.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe::worker {
namespace {

// The parts of nvml.h we use (R535+). nvmlGpuFabricInfo_t as declared there.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct NvmlGpuFabricInfo {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
};
constexpr unsigned char kFabricStateCompleted = 3;

}  // namespace

std::string NvmlFabricDomain(int index, std::string* why) {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *why = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
    return "";
  }
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(::dlsym(lib, "nvmlShutdown"));
  auto handle = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(
      ::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto fabric = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, NvmlGpuFabricInfo*)>(
      ::dlsym(lib, "nvmlDeviceGetGpuFabricInfo"));
  std::string out;
  if (init == nullptr || handle == nullptr || fabric == nullptr) {
    *why = "this driver's NVML has no GPU fabric info";
  } else if (init() != 0) {
    *why = "nvmlInit failed";
  } else {
    nvmlDevice_t dev = nullptr;
    NvmlGpuFabricInfo info{};
    if (handle(static_cast<unsigned int>(index), &dev) != 0) {
      *why = "no GPU " + std::to_string(index);
    } else if (const int rc = fabric(dev, &info); rc != 0) {
      *why = "GPU " + std::to_string(index) + " reports no NVLink fabric (NVML error " +
             std::to_string(rc) + ")";
    } else if (info.state != kFabricStateCompleted || info.status != 0) {
      *why = "GPU " + std::to_string(index) + "'s fabric registration is not complete";
    } else {
      char hex[40];
      for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", info.clusterUuid[i]);
      out = std::string(hex) + "." + std::to_string(info.cliqueId);
    }
    if (shutdown) shutdown();
  }
  ::dlclose(lib);
  return out;
}

Topology DetectTopology(const std::string& device, const std::string& rack_flag,
                        const std::string& node_flag) {
  Topology t;
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const char* env_rack = std::getenv("MOE_RACK");
  const char* env_node = std::getenv("MOE_NODE");
  t.node = !node_flag.empty() ? node_flag : (env_node && *env_node ? env_node : host);
  std::string why = "not a GPU worker";
  if (device.rfind("cuda:", 0) == 0 && rack_flag.empty()) {
    const std::string domain = NvmlFabricDomain(std::atoi(device.c_str() + 5), &why);
    if (!domain.empty()) {
      t.rack = domain;
      t.source = "NVML GPU fabric info (clusterUuid.cliqueId)";
      return t;
    }
  }
  if (!rack_flag.empty()) {
    t.rack = rack_flag;
    t.source = "--rack";
  } else if (env_rack && *env_rack) {
    t.rack = env_rack;
    t.source = "MOE_RACK";
  } else {
    t.rack = "default";
    t.source = "default (" + why + "; no --rack or MOE_RACK)";
  }
  return t;
}

}  // namespace moe::worker
