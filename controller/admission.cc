#include "controller/admission.h"

#include <sys/stat.h>

#include <cstdio>
#include <functional>
#include <set>

#include "common/memory_model.h"
#include "common/path_roots.h"

namespace moe::controller {

Status ApplyPriorityClass(const ControllerConfig& config, JobSpec* spec) {
  if (spec->priority_class.empty()) return OkStatus();
  const auto it = config.priority_classes.find(spec->priority_class);
  if (it == config.priority_classes.end()) {
    std::string known;
    for (const auto& [name, pc] : config.priority_classes)
      known += (known.empty() ? "" : ", ") + name;
    return InvalidArgumentError(
        "metadata.priority_class: unknown class '" + spec->priority_class + "' (" +
        (known.empty() ? "this controller defines none" : "known: " + known) +
        "; moe-controller --priority-class)");
  }
  spec->priority = it->second.priority;
  return OkStatus();
}

bool Preemptible(const ControllerConfig& config, const JobSpec& spec) {
  const auto it = config.priority_classes.find(spec.priority_class);
  return it == config.priority_classes.end() || it->second.preemptible;
}

int64_t RankMemoryNeed(JobEntry& e) {
  if (e.memory_need >= 0) return e.memory_need;
  auto plan = EstimateMemory(e.spec, e.spec.resources.device == "cpu" ? 4 : 2);
  e.memory_need = plan.ok() ? static_cast<int64_t>(plan->largest().peak()) : 0;
  return e.memory_need;
}

Status CheckMemoryFits(const JobSpec& spec, const WorkerRegistry& workers) {
  // The largest memory a live worker of the job's device type reports; none reported: nothing to
  // check.
  int64_t most = 0;
  std::string where;
  // The registry's entries as they are (a listing of each would cost a copy per device per submit).
  for (const auto& [name, w] : workers.all()) {
    const std::string& device = w.info.device();
    const bool kind =
        spec.resources.device == "cpu" ? device == "cpu" : device.rfind("cuda", 0) == 0;
    if (!kind || w.lost) continue;
    const int64_t memory = workers.MemoryFor(name);
    if (memory > most) most = memory, where = name;
  }
  if (most == 0) return OkStatus();
  auto plan = EstimateMemory(spec, spec.resources.device == "cpu" ? 4 : 2);
  if (!plan.ok()) return plan.status();
  const StageMemory& big = plan->largest();
  if (big.peak() <= static_cast<double>(most)) return OkStatus();
  size_t top = 0;
  for (size_t k = 1; k < kNumMemoryKinds; ++k) top = big.bytes[k] > big.bytes[top] ? k : top;
  char msg[512];
  std::snprintf(
      msg, sizeof(msg),
      "the job can never fit: pipeline rank %lld needs %.2f GB per rank (%s %.2f GB, the largest "
      "part; "
      "moe-train --describe shows all), more than the %.2f GB of the roomiest %s worker (%s)",
      static_cast<long long>(big.pp_rank), big.peak() / 1e9,
      std::string(MemoryKindName(static_cast<MemoryKind>(top))).c_str(), big.bytes[top] / 1e9,
      static_cast<double>(most) / 1e9, spec.resources.device.c_str(), where.c_str());
  return FailedPreconditionError(msg);
}

namespace {

// An absolute dataset under a data root this machine sees too (a shared file system the controller
// mounts) must exist here: refused at submit naming the path, not minutes later by a rank. Where
// the controller sees none of the roots that hold it, the first rank checks before the gang trains
// (a missing index fails the job at once, not retried).
Status CheckDatasetVisible(const JobSpec& spec, const WorkerRegistry& workers) {
  // The files, not the prefix, must lie below a root (as each worker checks: a prefix equal to a
  // root names files beside it).
  const std::string index = NormalizeAbsolute(spec.data.path, "/") + ".idx";
  std::set<std::string> seen;
  for (const auto& [name, e] : workers.all()) {
    const moe::v1::Worker& w = e.info;
    const bool kind =
        spec.resources.device == "cpu" ? w.device() == "cpu" : w.device().rfind("cuda", 0) == 0;
    if (!kind || e.lost || e.leaving || e.drained) continue;  // the workers that could run it
    for (const std::string& root : w.data_roots()) {
      if (!seen.insert(root).second || !IsUnder(index, NormalizeAbsolute(root, "/"))) continue;
      struct stat st {};
      if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // not seen here
      if (::stat(index.c_str(), &st) == 0) return OkStatus();
      return FailedPreconditionError("spec.data.path: " + index +
                                     " does not exist (the data root " + root +
                                     " is visible to the controller; prepare the dataset with "
                                     "moe-prep, or fix the path)");
    }
  }
  return OkStatus();
}

}  // namespace

// Lexically (the controller does not see the workers' files; each worker checks again, following
// its symbolic links): refused when every live worker of the job's device type confines that kind
// of path and none allows it. Workers without roots allow anything.
Status CheckPathsAllowed(const JobSpec& spec, const WorkerRegistry& workers) {
  using Roots = google::protobuf::RepeatedPtrField<std::string>;
  const auto check =
      [&](const std::string& field, const std::string& path, const std::string& what,
          const std::function<const Roots&(const moe::v1::Worker&)>& roots_of) -> Status {
    Status refusal = OkStatus();
    std::set<std::string> agents;  // an agent's devices share its roots: one check per agent
    for (const auto& [name, e] : workers.all()) {
      const moe::v1::Worker& w = e.info;
      const bool kind =
          spec.resources.device == "cpu" ? w.device() == "cpu" : w.device().rfind("cuda", 0) == 0;
      if (!kind || e.lost || e.leaving || !agents.insert(e.agent).second) continue;
      Status st =
          CheckUnderRoots(field, path, {roots_of(w).begin(), roots_of(w).end()}, what, false, "/");
      if (st.ok()) return OkStatus();
      refusal = FailedPreconditionError(st.message() + " (worker " + name + "; no live " +
                                        spec.resources.device + " worker allows it)");
    }
    return refusal;
  };
  if (spec.data.source != "synthetic" && !spec.data.path.empty() && spec.data.path[0] == '/') {
    MOE_RETURN_IF_ERROR(
        check("spec.data.path", spec.data.path, "data",
              [](const moe::v1::Worker& w) -> const Roots& { return w.data_roots(); }));
    MOE_RETURN_IF_ERROR(CheckDatasetVisible(spec, workers));
  }
  if (spec.checkpoint.dir.empty() || spec.checkpoint.dir[0] != '/') return OkStatus();
  return check("spec.checkpoint.dir", spec.checkpoint.dir, "checkpoint",
               [](const moe::v1::Worker& w) -> const Roots& { return w.checkpoint_roots(); });
}

namespace {

// A checkpoint directory as the controller can see it: ".." resolved, and symbolic links too where
// the path exists on this machine (a shared file system the controller mounts).
std::string Resolved(const std::string& dir) { return ResolveOnDisk(NormalizeAbsolute(dir, "/")); }

}  // namespace

Status CheckCheckpointDirFree(const JobSpec& spec, const std::string& owner, JobManager& jobs) {
  if (spec.checkpoint.dir.empty()) return OkStatus();
  const std::string want = Resolved(spec.checkpoint.dir);
  for (JobEntry* e : jobs.AllWithCreating()) {
    if (e->spec.checkpoint.dir.empty()) continue;
    if (e->resolved_checkpoint_dir.empty())
      e->resolved_checkpoint_dir = Resolved(e->spec.checkpoint.dir);
    if (e->resolved_checkpoint_dir != want) continue;
    const bool live = !IsTerminal(e->job.state());
    // A finished job's directory passes to its resubmission alone: the same name, the same owner.
    if (!live && e->spec.name == spec.name && e->job.owner() == owner) continue;
    return FailedPreconditionError("spec.checkpoint.dir: " + spec.checkpoint.dir + " (" + want +
                                   ") is the checkpoint directory of " +
                                   (live ? "live" : "finished") + " job " + e->job.id() +
                                   "; a directory serves one job for its whole life (a new job "
                                   "of the same name and owner may take a finished one's)");
  }
  return OkStatus();
}

}  // namespace moe::controller
