#include "controller/dependencies.h"

namespace moe::controller {

Status ResolveDependencies(JobSpec* spec, const std::string& owner, JobManager& jobs) {
  for (size_t i = 0; i < spec->depends_on.size(); ++i) {
    JobDependency& d = spec->depends_on[i];
    if (jobs.Find(d.job) != nullptr) continue;  // an id
    // A name is one of the submitter's own jobs: another user's job of the same name must not start
    // this one (alice's `train` after bob's `prep`).
    const JobEntry* newest = nullptr;
    bool others = false;
    for (JobEntry* e : jobs.All()) {
      if (e->spec.name != d.job) continue;
      if (e->job.owner() != owner) {
        others = true;
        continue;
      }
      if (newest == nullptr || e->job.created_at() > newest->job.created_at()) newest = e;
    }
    if (newest == nullptr) {
      return InvalidArgumentError(
          "metadata.depends_on[" + std::to_string(i) + "].job: no job '" + d.job + "'" +
          (others ? " of yours (a name resolves among the submitter's own jobs; another user's job "
                    "is named by its id)"
                  : " (neither the id nor the name of a job the controller holds)"));
    }
    d.job = newest->job.id();
  }
  return OkStatus();
}

DependencyCheck CheckDependencies(const JobEntry& e, JobManager& jobs) {
  for (size_t i = 0; i < e.spec.depends_on.size(); ++i) {
    const JobDependency& d = e.spec.depends_on[i];
    const bool succeed = d.condition != "finished";
    const std::string field = "metadata.depends_on[" + std::to_string(i) + "]";
    const JobEntry* dep = jobs.Find(d.job);
    if (dep == nullptr) {
      return {DependencyCheck::kNever,
              "its dependency job " + d.job + " no longer exists (deleted); " + field +
                  (succeed ? " needs it to succeed" : " needs it to finish")};
    }
    const moe::v1::JobState s = dep->job.state();
    const std::string state = moe::v1::JobState_Name(s);
    if (s == moe::v1::INVALID || (succeed && IsTerminal(s) && s != moe::v1::SUCCEEDED)) {
      return {DependencyCheck::kNever, "its dependency job " + d.job + " ended " + state + "; " +
                                           field + " needs it to succeed"};
    }
    if (!IsTerminal(s)) {
      return {DependencyCheck::kWait, "waiting for job " + d.job + " to " +
                                          (succeed ? "succeed" : "finish") + " (it is " + state +
                                          ")"};
    }
  }
  return {DependencyCheck::kReady, ""};
}

}  // namespace moe::controller
