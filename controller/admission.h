// What a submit must pass before a job is stored (beyond the spec's own validation,
// common/job_spec.h): its priority class, memory that some worker has, paths the workers allow, a
// checkpoint directory no live job uses. Functions of the state they are given; the Controller
// calls them under its mutex.
#pragma once

#include <string>

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
// accounting), 0 when the model cannot be estimated; computed once per job and kept in its entry.
int64_t RankMemoryNeed(JobEntry& e);
// The job's absolute data and checkpoint paths against the roots the live workers reported
// (lexically: each worker checks again, following its symbolic links).
Status CheckPathsAllowed(const JobSpec& spec, const WorkerRegistry& workers);
// FAILED_PRECONDITION when another job the controller holds, live or finished, checkpoints to the
// same directory (".." resolved, and symbolic links where the path exists on the controller's
// machine; the workers resolve them too and read the directory's owner marker). A finished job of
// the same name and owner gives it to its resubmission.
Status CheckCheckpointDirFree(const JobSpec& spec, const std::string& owner, JobManager& jobs);

}  // namespace moe::controller
