#include "worker/agent/topology.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
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

int NvmlDeviceCount(std::string* why) {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *why = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
    return -1;
  }
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(::dlsym(lib, "nvmlShutdown"));
  auto count =
      reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  int out = -1;
  unsigned int n = 0;
  if (init == nullptr || count == nullptr) {
    *why = "this driver's NVML has no nvmlDeviceGetCount_v2";
  } else if (init() != 0) {
    *why = "nvmlInit failed";
  } else {
    if (count(&n) == 0) out = static_cast<int>(n);
    if (out < 0) *why = "nvmlDeviceGetCount failed";
    if (shutdown) shutdown();
  }
  ::dlclose(lib);
  return out;
}

namespace {

// One GPU of a --devices list: "3" or "cuda:3".
StatusOr<int> GpuIndex(const std::string& item) {
  const std::string digits = item.rfind("cuda:", 0) == 0 ? item.substr(5) : item;
  if (digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError("--devices: '" + item +
                                "' is not a GPU index (0-7, 0,2,4, cuda:0,cuda:1 or all)");
  }
  return std::atoi(digits.c_str());
}

StatusOr<std::vector<std::string>> ParseGpuList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    const size_t dash = item.find('-');
    MOE_ASSIGN_OR_RETURN(int lo, GpuIndex(item.substr(0, dash)));
    int hi = lo;
    if (dash != std::string::npos) {
      MOE_ASSIGN_OR_RETURN(hi, GpuIndex(item.substr(dash + 1)));
    }
    if (hi < lo) return InvalidArgumentError("--devices: the range '" + item + "' runs backwards");
    for (int i = lo; i <= hi && out.size() <= 256; ++i) out.push_back("cuda:" + std::to_string(i));
    start = comma + 1;
  }
  std::vector<std::string> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return InvalidArgumentError("--devices: a GPU listed twice in '" + list + "'");
  if (out.size() > 256) return InvalidArgumentError("--devices: at most 256 GPUs a node");
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ParseDevices(const std::string& device,
                                                const std::string& devices, int slots) {
  if (!devices.empty() && slots > 0)
    return InvalidArgumentError("--devices and --slots: give one (GPUs, or a CPU node's slots)");
  if (devices == "all") {
    std::string why;
    const int n = NvmlDeviceCount(&why);
    if (n <= 0) {
      return InvalidArgumentError("--devices all: " + (n == 0 ? "the driver lists no GPU" : why) +
                                  "; name them instead (--devices 0-7)");
    }
    return ParseGpuList("0-" + std::to_string(n - 1));
  }
  if (!devices.empty()) return ParseGpuList(devices);
  if (device != "cpu" && (device.rfind("cuda:", 0) != 0 || !GpuIndex(device).ok()))
    return InvalidArgumentError("--device: expected cpu or cuda:N, got '" + device + "'");
  if (slots > 0 && device != "cpu")
    return InvalidArgumentError("--slots: for a CPU node (--device cpu); GPUs: --devices");
  return std::vector<std::string>(static_cast<size_t>(std::max(slots, 1)), device);
}

}  // namespace moe::worker
