#include "controller/worker_claims.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace moe::controller {
namespace {

Status Field(const std::string& field, const std::string& why) {
  return InvalidArgumentError("register: " + field + ": " + why);
}

bool IsAddressChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
         c == '[' || c == ']' || c == '_';
}

Status CheckDevice(const std::string& d) {
  if (d == "cpu") return OkStatus();
  if (d.rfind("cuda:", 0) != 0 || d.size() < 6 || d.size() > 9) {
    return Field("device",
                 "expected cpu or cuda:N (N in 0.." + std::to_string(kMaxCudaDevice) + ")");
  }
  for (size_t i = 5; i < d.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(d[i])))
      return Field("device", "cuda:N needs a number N");
  }
  if (std::stoi(d.substr(5)) > kMaxCudaDevice || (d.size() > 6 && d[5] == '0')) {
    return Field("device",
                 "cuda:N with N in 0.." + std::to_string(kMaxCudaDevice) + ", no leading zeros");
  }
  return OkStatus();
}

bool Printable(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// The agent's device list: at most kMaxAgentDevices, each cpu or cuda:N, no GPU twice; the first
// is the registration's `device`.
Status CheckDevices(const moe::v1::Register& reg) {
  if (reg.devices_size() == 0) return OkStatus();
  if (reg.devices_size() > kMaxAgentDevices)
    return Field("devices", "at most " + std::to_string(kMaxAgentDevices));
  if (reg.devices(0) != reg.device()) return Field("devices", "the first must be `device`");
  std::vector<std::string> gpus;
  for (const auto& d : reg.devices()) {
    if (Status st = CheckDevice(d); !st.ok())
      return Field("devices",
                   d + " is not cpu or cuda:N with N in 0.." + std::to_string(kMaxCudaDevice));
    if (d != "cpu") gpus.push_back(d);
  }
  std::sort(gpus.begin(), gpus.end());
  if (std::adjacent_find(gpus.begin(), gpus.end()) != gpus.end())
    return Field("devices", "a GPU listed twice");
  return OkStatus();
}

// The ranks it says it runs (on which of its devices) and the outcomes it brings.
Status CheckRankClaims(const moe::v1::Register& reg) {
  const int devices = std::max(1, reg.devices_size());
  if (reg.running_size() > kMaxRunningClaims * devices)
    return Field("running", "at most " + std::to_string(kMaxRunningClaims) + " per device");
  for (const auto& r : reg.running()) {
    if (r.device_index() < 0 || r.device_index() >= devices)
      return Field("running.device_index", "must be in 0.." + std::to_string(devices - 1));
  }
  if (reg.finished_size() > kMaxFinishedClaims) {
    return Field("finished", "at most " + std::to_string(kMaxFinishedClaims));
  }
  for (const auto& f : reg.finished()) {
    if (f.message().size() > kMaxMessageBytes)
      return Field("finished.message", "at most 4096 bytes");
  }
  return OkStatus();
}

}  // namespace

std::string DeviceWorkerName(const std::string& agent, int index, int count) {
  return count <= 1 ? agent : agent + "/" + std::to_string(index);
}

std::string AgentOfWorker(const std::string& worker) { return worker.substr(0, worker.find('/')); }

int DeviceIndexOfWorker(const std::string& worker) {
  const size_t slash = worker.find('/');
  return slash == std::string::npos ? 0 : std::atoi(worker.c_str() + slash + 1);
}

std::vector<moe::v1::Register> DeviceRegistrations(const moe::v1::Register& reg) {
  const int n = std::max(1, reg.devices_size());
  std::vector<moe::v1::Register> out(static_cast<size_t>(n), reg);
  for (int i = 0; i < n; ++i) {
    moe::v1::Register& d = out[static_cast<size_t>(i)];
    d.set_name(DeviceWorkerName(reg.name(), i, n));
    if (reg.devices_size() > 0) d.set_device(reg.devices(i));
    d.clear_devices();
    d.clear_finished();
    d.clear_running();
    for (const auto& r : reg.running()) {
      if (r.device_index() == i) *d.add_running() = r;
    }
  }
  return out;
}

bool IsSimpleName(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char c : s) {
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

Status ValidateRegistration(const moe::v1::Register& reg) {
  const std::string grammar = "[A-Za-z0-9][A-Za-z0-9._-]*, at most ";
  if (!IsSimpleName(reg.name(), kMaxWorkerNameBytes)) {
    return Field("name", grammar + std::to_string(kMaxWorkerNameBytes) + " bytes");
  }
  if (!IsSimpleName(reg.rack(), kMaxRackBytes))
    return Field("rack", grammar + std::to_string(kMaxRackBytes) + " bytes");
  if (!IsSimpleName(reg.node(), kMaxWorkerNameBytes)) {
    return Field("node", grammar + std::to_string(kMaxWorkerNameBytes) + " bytes");
  }
  MOE_RETURN_IF_ERROR(CheckDevice(reg.device()));
  MOE_RETURN_IF_ERROR(CheckDevices(reg));
  if (reg.address().size() > kMaxAddressBytes ||
      !std::all_of(reg.address().begin(), reg.address().end(), IsAddressChar)) {
    return Field("address", "a host name or IP address, at most " +
                                std::to_string(kMaxAddressBytes) + " bytes");
  }
  if (reg.cpu_cores() < 0 || reg.cpu_cores() > kMaxCpuCores) {
    return Field("cpu_cores", "must be in 0.." + std::to_string(kMaxCpuCores));
  }
  if (reg.memory_bytes() < 0 || reg.memory_bytes() > (int64_t{1} << 50))
    return Field("memory_bytes", "must be in 0..2^50");
  if (reg.host_id().size() > 512 || !Printable(reg.host_id()))
    return Field("host_id", "at most 512 printable bytes");
  if (reg.version().size() > 64 || !Printable(reg.version()))
    return Field("version", "at most 64 printable bytes");
  if (reg.session().size() > 128) return Field("session", "at most 128 bytes");
  for (const auto* roots : {&reg.data_roots(), &reg.checkpoint_roots()}) {
    if (roots->size() > kMaxRootsPerKind) {
      return Field(roots == &reg.data_roots() ? "data_roots" : "checkpoint_roots",
                   "at most " + std::to_string(kMaxRootsPerKind));
    }
    for (const auto& r : *roots) {
      if (r.empty() || r.size() > kMaxRootBytes || r[0] != '/' || !Printable(r)) {
        return Field(
            roots == &reg.data_roots() ? "data_roots" : "checkpoint_roots",
            "absolute paths of at most " + std::to_string(kMaxRootBytes) + " printable bytes");
      }
    }
  }
  // What the controller keeps and lists of each worker, whatever each field's own bound.
  moe::v1::Register kept = reg;
  kept.clear_running();
  kept.clear_finished();
  if (kept.ByteSizeLong() > kMaxRegistrationBytes) {
    return Field("(the whole)", "the worker's metadata is " + std::to_string(kept.ByteSizeLong()) +
                                    " bytes; at most " + std::to_string(kMaxRegistrationBytes));
  }
  return CheckRankClaims(reg);
}

Status ValidateStepReport(const moe::v1::StepReport& s, int layers, int world) {
  const moe::v1::StepMetrics& m = s.metrics();
  auto bad = [](const std::string& f, const std::string& why) {
    return InvalidArgumentError("step report: metrics." + f + ": " + why);
  };
  if (m.step() < 0 || m.total_steps() < 0 || m.tokens() < 0)
    return bad("step", "steps and tokens are not negative");
  if (m.expert_load_imbalance_per_layer_size() > layers) {
    return bad("expert_load_imbalance_per_layer",
               "more entries than the model's " + std::to_string(layers) + " layers");
  }
  if (m.rank_step_seconds_size() > world || m.rank_compute_seconds_size() > world ||
      m.rank_racks_size() > world || m.stragglers_size() > world) {
    return bad("rank_*", "more entries than the job's " + std::to_string(world) + " ranks");
  }
  if (m.mfu_peak_source().size() > 256) return bad("mfu_peak_source", "at most 256 bytes");
  for (const auto& rack : m.rank_racks()) {
    if (rack.size() > kMaxRackBytes) return bad("rank_racks", "at most 128 bytes each");
  }
  return OkStatus();
}

std::string ImplausibleStep(const moe::v1::StepMetrics& m, const JobSpec& spec, int64_t last_step,
                            double attempt_seconds) {
  const int64_t total = spec.training.steps;
  if (m.step() > total)
    return "step " + std::to_string(m.step()) + " past the job's " + std::to_string(total);
  if (m.step() < last_step)
    return "step " + std::to_string(m.step()) + " behind step " + std::to_string(last_step) +
           " of the same attempt (steps only move forward)";
  const double bound = std::max(0.0, attempt_seconds) + 600;
  for (double v : {m.step_seconds(), m.checkpoint_stall_seconds(), m.eval_seconds(),
                   m.alltoall_seconds(), m.compute_seconds(), m.grad_sync_seconds()}) {
    if (!std::isfinite(v) || v < 0 || v > bound) {
      return "a time of " + std::to_string(v) + " s in an attempt placed " +
             std::to_string(static_cast<int64_t>(attempt_seconds)) + " s ago";
    }
  }
  const double batch_tokens =
      static_cast<double>(spec.data.global_batch_size) * static_cast<double>(spec.data.seq_length);
  if (static_cast<double>(m.tokens()) > batch_tokens)
    return std::to_string(m.tokens()) + " tokens in one step, over the global batch's " +
           std::to_string(static_cast<int64_t>(batch_tokens));
  return "";
}

bool StepFiguresPlausible(const moe::v1::StepMetrics& m) {
  // The loss and gradient norm may be non-finite: a diverging run reports what it sees.
  for (double v :
       {m.step_seconds(), m.tokens_per_second(), m.tflops_per_device(), m.mfu(),
        m.alltoall_seconds(), m.compute_seconds(), m.grad_sync_seconds(), m.eta_seconds()}) {
    if (!std::isfinite(v) || v < 0) return false;
  }
  return m.mfu() <=
         1.5;  // above the peak by half: a wrong peak or a wrong report, not a measurement
}

}  // namespace moe::controller
