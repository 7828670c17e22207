// What a worker may claim about itself, and what a rank may report: the grammar of names, devices
// and addresses, and the bounds of counts, checked before anything is kept (docs/operations.md,
// "Limits"). A claim outside them is refused with INVALID_ARGUMENT naming the field.
#pragma once

#include <string>
#include <vector>

#include "common/job_spec_types.h"
#include "common/status.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// Limits of a registration.
inline constexpr size_t kMaxWorkerNameBytes = 63;  // name, node: [A-Za-z0-9][A-Za-z0-9._-]*
inline constexpr size_t kMaxRackBytes = 128;       // racks may be NVML's clusterUuid.cliqueId
inline constexpr size_t kMaxAddressBytes = 253;
inline constexpr int kMaxCudaDevice = 1023;
inline constexpr int kMaxCpuCores = 65536;
inline constexpr int kMaxRunningClaims = 4;   // per device
inline constexpr int kMaxAgentDevices = 256;  // devices (GPUs, CPU slots) of one node agent
inline constexpr int kMaxFinishedClaims = 64;
inline constexpr size_t kMaxMessageBytes = 4096;  // a rank's failure text, kept in events
inline constexpr int kMaxRootsPerKind = 8;        // --data-root, --checkpoint-root
inline constexpr size_t kMaxRootBytes = 1024;
// A worker's registration without its rank claims: what the controller keeps and lists of it. With
// ListWorkers paged (8 MiB at most a page), no number of workers can outgrow a message.
inline constexpr size_t kMaxRegistrationBytes = 8192;

// `s` matches [A-Za-z0-9][A-Za-z0-9._-]* and is at most `max` bytes.
bool IsSimpleName(const std::string& s, size_t max);
// Checks every field of a Register (name, rack, node, device, address, cores, claims).
Status ValidateRegistration(const moe::v1::Register& reg);

// A node agent's devices are the workers ranks are placed on: the agent `a` of one device is the
// worker `a`; of N > 1, the workers `a/0` ... `a/N-1` (a name no agent can register: '/' is not in
// the names' grammar). They share the agent's connection, lease and session.
std::string DeviceWorkerName(const std::string& agent, int index, int count);
// The agent a worker belongs to (the name before its '/') and its device's index there.
std::string AgentOfWorker(const std::string& worker);
int DeviceIndexOfWorker(const std::string& worker);
// A (valid) registration as its devices' own: name, device and the running ranks each reports; the
// rest as the agent said (rack, node, roots, cores, memory per device). Its `finished` stay with
// the agent's registration.
std::vector<moe::v1::Register> DeviceRegistrations(const moe::v1::Register& reg);
// A step report's shape, from a rank of a model with `layers` layers and `world` ranks: steps and
// tokens not negative, arrays no longer than the model's layers or the job's ranks. A report
// outside it ends the worker's stream (INVALID_ARGUMENT).
Status ValidateStepReport(const moe::v1::StepReport& s, int layers, int world);
// Its figures: times and rates finite and not negative, MFU at most 1.5. An implausible report is
// dropped (logged), not kept on /metrics; the worker's stream goes on.
bool StepFiguresPlausible(const moe::v1::StepMetrics& m);
// Why a step report cannot be true of the job (empty when it may be): a step past the job's total
// or behind `last_step` (the attempt's furthest: steps only move forward), a time (the step's, a
// checkpoint stall, an evaluation, its parts) longer than the attempt has existed
// (`attempt_seconds`, with 10 minutes' slack), more tokens than one global batch holds.
std::string ImplausibleStep(const moe::v1::StepMetrics& m, const JobSpec& spec, int64_t last_step,
                            double attempt_seconds);

}  // namespace moe::controller
