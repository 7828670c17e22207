// What a submit must pass before a job is stored (beyond the spec's own validation,
// common/job_spec.h): its priority class, memory that some worker has, paths the workers allow, a
// checkpoint directory no live job uses. Functions of the state they are given; the Controller
// calls them under its mutex.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "controller/config.h"
#include "controller/job_manager.h"
#include "controller/worker_registry.h"

namespace moe::controller {

// metadata.priority_class: the class's priority replaces metadata.priority; INVALID_ARGUMENT naming
// the known classes for an unknown one.
Status ApplyPriorityClass(const ControllerConfig& config, JobSpec* spec);
// False for a job of a class marked never-preempted.
bool Preemptible(const ControllerConfig& config, const JobSpec& spec);
// Refuses a job whose per-rank memory (common/memory_model.h, moe-train --describe's accounting)
// exceeds the memory every live worker of its device type reports; nothing reported: nothing
// refused.
Status CheckMemoryFits(const JobSpec& spec, const WorkerRegistry& workers);
// Bytes one rank of the job needs at its largest pipeline stage (moe-train --describe's
// accounting), saturating at INT64_MAX, which is also the need of a model that cannot be estimated
// (it fits nowhere); computed once per job and kept in its entry.
int64_t RankMemoryNeed(JobEntry& e);
// Bytes as an int64_t, saturating: INT64_MAX at or past 2^63 (and for NaN), 0 below zero.
int64_t SaturatingBytes(double bytes);
// The job's absolute data and checkpoint paths against the roots the live workers reported
// (lexically: each worker checks again, following its symbolic links).
Status CheckPathsAllowed(const JobSpec& spec, const WorkerRegistry& workers);

// The data roots of the workers that could take a job (live, not drained), by device kind ("cpu",
// "cuda"), refreshed by the tick once a second and read without the controller's lock, so that the
// dataset check's stat() calls run outside it: a slow or hung shared file system holds up only that
// submit, never the heartbeats or the tick.
class DataRootsView {
 public:
  void Refresh(const WorkerRegistry& workers);
  // A worker that just registered: its roots count at once, not from the next walk (which may be
  // 15 s away on a large cluster); a submit right after a worker came up was not checked. Removals
  // wait for the walk (a root kept a little longer only lets the workers check the path instead).
  void Add(const std::string& device, const google::protobuf::RepeatedPtrField<std::string>& roots);
  std::vector<std::string> For(const std::string& device) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::set<std::string>> by_kind_;
};
// An absolute dataset whose index lies below one of those roots that this machine sees too (the
// root is a non-empty directory here: the same machine, a shared file system; an empty local mount
// point is not taken for the workers' volume) must exist: FAILED_PRECONDITION naming `<path>.idx`.
// Else the first rank checks it before the gang trains.
Status CheckDatasetVisible(const JobSpec& spec, const DataRootsView& roots);
// FAILED_PRECONDITION when another job the controller holds, live or finished, checkpoints to the
// same directory, one inside it or one around it (".." resolved, and symbolic links where the path
// exists on the controller's machine; the workers resolve them too and read the directory's owner
// marker), or when it is the controller's checkpoint root or holds it. A finished job of the same
// name and owner gives its own directory to its resubmission, and `inherited` (when given) its
// newest checkpoint: the resubmission resumes from it (a success that had nothing left to train is
// believed on it).
// A checkpoint directory as the controller can see it: ".." resolved, and symbolic links too where
// the path exists on this machine (a shared file system the controller mounts). JobManager's
// checkpoint key.
std::string ResolvedCheckpointDir(const std::string& dir);
// `resolved_root`: the controller's checkpoint root as ResolvedCheckpointDir gives it ("" for
// none).
Status CheckCheckpointDirFree(const JobSpec& spec, const std::string& owner, JobManager& jobs,
                              const std::string& resolved_root, int64_t* inherited = nullptr);

// JobManager's checkpoint key with the controller's checkpoint root resolved at most once a second:
// every submit asks for the root and for the key of a directory beneath it (a new job's default
// one, `root/<id>`), and each resolution is a walk of lstat(2) and readlink(2) along the path (6 %
// of the controller's CPU in a burst of submits). Key(dir) is ResolvedCheckpointDir(dir), except
// for a directory one name beneath the root that does not exist: the cached root and that name (one
// lstat), which is what ResolvedCheckpointDir gives while the root resolves as cached. A symbolic
// link along the root changed under a running controller reaches the keys within a second.
// Thread-safe.
class CheckpointKeys {
 public:
  explicit CheckpointKeys(const std::string& root);  // "": no root (every key resolved afresh)
  std::string ResolvedRoot();                        // "" without a root
  std::string Key(const std::string& dir);

 private:
  std::mutex mu_;
  std::string root_;  // ".." resolved, absolute
  std::string resolved_;
  std::chrono::steady_clock::time_point resolved_at_;
  bool have_ = false;
};

}  // namespace moe::controller
