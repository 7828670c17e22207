#include "controller/admission.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <limits>
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

int64_t SaturatingBytes(double bytes) {
  // 2^63 as a double; at or past it (or NaN) the cast would be undefined: an absurd model's 3.4e23
  // bytes came out negative and fitted every worker.
  constexpr double kLimit = 9223372036854775808.0;
  if (!(bytes < kLimit)) return std::numeric_limits<int64_t>::max();
  return bytes <= 0 ? 0 : static_cast<int64_t>(bytes);
}

int64_t RankMemoryNeed(JobEntry& e) {
  if (e.memory_need >= 0) return e.memory_need;
  auto plan = EstimateMemory(e.spec, e.spec.resources.device == "cpu" ? 4 : 2);
  // A spec whose memory cannot be estimated fits nowhere: submit refuses it where a worker is up,
  // and one submitted before any worker joined must not slip through at placement.
  e.memory_need =
      plan.ok() ? SaturatingBytes(plan->largest().peak()) : std::numeric_limits<int64_t>::max();
  return e.memory_need;
}

Status CheckMemoryFits(const JobSpec& spec, const WorkerRegistry& workers) {
  // The largest memory a live worker of the job's device type reports; none reported: nothing to
  // check.
  const WorkerRegistry::Roomy& roomy = workers.Roomiest(spec.resources.device == "cpu");
  const int64_t most = roomy.bytes;
  const std::string& where = roomy.name;
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
  }
  if (spec.checkpoint.dir.empty() || spec.checkpoint.dir[0] != '/') return OkStatus();
  return check("spec.checkpoint.dir", spec.checkpoint.dir, "checkpoint",
               [](const moe::v1::Worker& w) -> const Roots& { return w.checkpoint_roots(); });
}

namespace {

std::string DeviceKind(const std::string& device) {
  return device == "cpu" ? "cpu" : device.rfind("cuda", 0) == 0 ? "cuda" : device;
}

// A directory here with at least one entry.
bool NonEmptyDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool any = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") {
      any = true;
      break;
    }
  }
  ::closedir(d);
  return any;
}

}  // namespace

void DataRootsView::Refresh(const WorkerRegistry& workers) {
  std::map<std::string, std::set<std::string>> by_kind;
  for (const auto& [name, e] : workers.all()) {
    if (e.lost || e.leaving || e.drained) continue;
    for (const std::string& root : e.info.data_roots())
      by_kind[DeviceKind(e.info.device())].insert(root);
  }
  std::lock_guard<std::mutex> lock(mu_);
  by_kind_ = std::move(by_kind);
}

void DataRootsView::Add(const std::string& device,
                        const google::protobuf::RepeatedPtrField<std::string>& roots) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string>& kind = by_kind_[DeviceKind(device)];
  kind.insert(roots.begin(), roots.end());
}

std::vector<std::string> DataRootsView::For(const std::string& device) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_kind_.find(DeviceKind(device));
  return it == by_kind_.end() ? std::vector<std::string>{}
                              : std::vector<std::string>(it->second.begin(), it->second.end());
}

Status CheckDatasetVisible(const JobSpec& spec, const DataRootsView& roots) {
  if (spec.data.source == "synthetic" || spec.data.path.empty() || spec.data.path[0] != '/')
    return OkStatus();
  // The files, not the prefix, must lie below a root (as each worker checks: a prefix equal to a
  // root names files beside it).
  const std::string index = NormalizeAbsolute(spec.data.path, "/") + ".idx";
  for (const std::string& root : roots.For(spec.resources.device)) {
    if (!IsUnder(index, NormalizeAbsolute(root, "/")) || !NonEmptyDir(root)) continue;
    struct stat st {};
    if (::stat(index.c_str(), &st) == 0) return OkStatus();
    return FailedPreconditionError("spec.data.path: " + index + " does not exist (the data root " +
                                   root +
                                   " is visible to the controller; prepare the dataset with "
                                   "moe-prep, or fix the path)");
  }
  return OkStatus();
}

namespace {}  // namespace

std::string ResolvedCheckpointDir(const std::string& dir) {
  return ResolveOnDisk(NormalizeAbsolute(dir, "/"));
}

namespace {

std::string Resolved(const std::string& dir) { return ResolvedCheckpointDir(dir); }

}  // namespace

namespace {

// Whether `inner` is `outer` or lies beneath it (both resolved, absolute).
bool Within(const std::string& inner, const std::string& outer) {
  if (outer == "/") return true;
  return inner == outer ||
         (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
          inner[outer.size()] == '/');
}

// A directory of another job that `want` equals, holds or lies inside: "" when none clashes.
std::string Clash(const std::string& want, const JobSpec& spec, const std::string& owner,
                  JobEntry* e, int64_t* inherited) {
  if (e->resolved_checkpoint_dir.empty())  // a JobManager without a checkpoint key (tests)
    e->resolved_checkpoint_dir = Resolved(e->spec.checkpoint.dir);
  const std::string& theirs = e->resolved_checkpoint_dir;
  const bool live = !IsTerminal(e->job.state());
  const std::string whose = std::string(live ? "live" : "finished") + " job " + e->job.id();
  if (theirs == want) {
    // A finished job's directory passes to its resubmission alone: the same name, the same owner.
    if (!live && e->spec.name == spec.name && e->job.owner() == owner) {
      *inherited = std::max(*inherited, e->job.checkpoint_step());
      return "";
    }
    return "is the checkpoint directory of " + whose +
           "; a directory serves one job for its whole life (a new job of the same name and owner "
           "may take a finished one's)";
  }
  // Nested either way, live or finished: one job's commits prune the step directories beneath its
  // own, which would delete the other's checkpoints. Between absolute directories only: a relative
  // one lies under each worker's first root, which the controller does not know (the workers' owner
  // markers guard those).
  if (spec.checkpoint.dir[0] != '/' || e->spec.checkpoint.dir[0] != '/') return "";
  if (Within(want, theirs))
    return "lies inside " + theirs + ", the checkpoint directory of " + whose;
  if (Within(theirs, want)) return "holds " + theirs + ", the checkpoint directory of " + whose;
  return "";
}

}  // namespace

Status CheckCheckpointDirFree(const JobSpec& spec, const std::string& owner, JobManager& jobs,
                              const std::string& resolved_root, int64_t* inherited) {
  int64_t ignored = 0;
  if (inherited == nullptr) inherited = &ignored;
  *inherited = 0;
  if (spec.checkpoint.dir.empty()) return OkStatus();
  std::string want = jobs.CheckpointKey(spec.checkpoint.dir);
  if (want.empty()) want = Resolved(spec.checkpoint.dir);  // a JobManager without a key (tests)
  const auto refuse = [&](const std::string& why) {
    return FailedPreconditionError("spec.checkpoint.dir: " + spec.checkpoint.dir + " (" + want +
                                   ") " + why);
  };
  if (spec.checkpoint.dir[0] == '/' && !resolved_root.empty() && Within(resolved_root, want))
    return refuse("is the controller's checkpoint root or holds it (" + resolved_root +
                  "): every job's default directory is beneath it; name a directory of its own");
  for (JobEntry* e : jobs.CheckpointNeighbours(want)) {
    if (e->spec.checkpoint.dir.empty()) continue;
    if (std::string why = Clash(want, spec, owner, e, inherited); !why.empty()) return refuse(why);
  }
  return OkStatus();
}

CheckpointKeys::CheckpointKeys(const std::string& root)
    : root_(root.empty() ? "" : NormalizeAbsolute(root, "/")) {}

std::string CheckpointKeys::ResolvedRoot() {
  if (root_.empty()) return "";
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!have_ || now - resolved_at_ > std::chrono::seconds(1)) {
    resolved_ = ResolvedCheckpointDir(root_);
    resolved_at_ = now;
    have_ = true;
  }
  return resolved_;
}

std::string CheckpointKeys::Key(const std::string& dir) {
  const std::string path = NormalizeAbsolute(dir, "/");
  if (root_.empty() || root_ == "/" || path.size() <= root_.size() + 1 ||
      path.compare(0, root_.size(), root_) != 0 || path[root_.size()] != '/' ||
      path.find('/', root_.size() + 1) != std::string::npos)
    return ResolvedCheckpointDir(dir);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 || errno != ENOENT) return ResolvedCheckpointDir(dir);
  const std::string root = ResolvedRoot();
  return (root == "/" ? "" : root) + path.substr(root_.size());
}

}  // namespace moe::controller
