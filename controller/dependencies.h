// metadata.depends_on (docs/job-spec.md): a job waits, PENDING, until each job it names reached its
// condition (succeeded: SUCCEEDED; finished: any final state); one whose condition can no longer
// hold is CANCELLED, naming the dependency and its state. Names resolve to ids at submit, so the
// stored spec (and a restarted controller) sees the ids. Free functions of the JobManager; the
// Controller calls them under its mutex.
#pragma once

#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "controller/job_manager.h"

namespace moe::controller {

// Each depends_on[i].job made an id (an id as it is, a name: the newest job of that name that
// `owner` submitted); INVALID_ARGUMENT naming metadata.depends_on[i].job for one the controller
// does not know, or a name only other users' jobs have.
Status ResolveDependencies(JobSpec* spec, const std::string& owner, JobManager& jobs);

struct DependencyCheck {
  enum Kind { kReady, kWait, kNever } kind = kReady;
  std::string why;  // kWait: the waiting reason; kNever: why the job is cancelled
};

// Where `e`'s dependencies stand now.
DependencyCheck CheckDependencies(const JobEntry& e, JobManager& jobs);

}  // namespace moe::controller
