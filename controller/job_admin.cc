// The Controller's job administration: paged listing with filters, deletion of finished jobs and
// their retention.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/label_selector.h"
#include "common/log.h"
#include "controller/controller.h"
#include "controller/goodput.h"

namespace moe::controller {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
constexpr size_t kMaxPageBytes = 8 << 20;  // half the message limit: a page always fits

// Page tokens are the position of the last job returned: "<created_at>/<id>".
std::string PageToken(const moe::v1::Job& j) {
  char t[64];
  std::snprintf(t, sizeof(t), "%.17g",
                j.created_at());  // exact: the next page starts right after it
  return std::string(t) + "/" + j.id();
}

StatusOr<std::pair<double, std::string>> ParsePageToken(const std::string& token) {
  const auto slash = token.find('/');
  char* end = nullptr;
  const double t = slash == std::string::npos ? 0 : std::strtod(token.c_str(), &end);
  if (slash == std::string::npos || end != token.c_str() + slash) {
    return InvalidArgumentError("page_token: not a token from a previous page");
  }
  return std::make_pair(t, token.substr(slash + 1));
}

}  // namespace

StatusOr<moe::v1::ListJobsResponse> Controller::ListPage(const moe::v1::ListJobsRequest& req) {
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return InvalidArgumentError("page_size: 0 (the default, " + std::to_string(kDefaultPageSize) +
                                ") to " + std::to_string(kMaxPageSize));
  }
  std::pair<double, std::string> after{-1, ""};
  if (!req.page_token().empty()) {
    MOE_ASSIGN_OR_RETURN(after, ParsePageToken(req.page_token()));
  }
  MOE_ASSIGN_OR_RETURN(const LabelSelector selector,
                       LabelSelector::Parse(req.label_selector(), "label_selector"));
  const size_t limit =
      req.page_size() == 0 ? kDefaultPageSize : static_cast<size_t>(req.page_size());
  moe::v1::ListJobsResponse out;
  {
    MutexLock lock(&mu_);
    // The matching jobs after the token, oldest first, from the jobs' index by creation: a page
    // looks at the jobs after its token until it has one more than it holds (the next token's
    // test), not at every job. Only the page's records are copied under the lock (the byte bound
    // may cut it short); its goodput is stamped after.
    const std::vector<const JobEntry*> match =
        jobs_.CreatedAfter(after, limit + 1, [&](const JobEntry& e) {
          const moe::v1::Job& j = e.job;
          if (j.id().rfind(req.name_prefix(), 0) != 0) return false;
          if (req.states_size() > 0 &&
              std::find(req.states().begin(), req.states().end(), j.state()) == req.states().end())
            return false;
          return selector.empty() || selector.Matches(e.spec.labels);
        });
    size_t bytes = 0;
    for (const JobEntry* e : match) {
      const size_t size = e->job.ByteSizeLong();
      if (static_cast<size_t>(out.jobs_size()) >= limit ||
          (out.jobs_size() > 0 && bytes + size > kMaxPageBytes)) {
        out.set_next_page_token(PageToken(out.jobs(out.jobs_size() - 1)));
        break;
      }
      bytes += size;
      moe::v1::Job* j = out.add_jobs();
      *j = e->job;
      if (IsQueued(j->state()) && !e->attempt) j->set_waiting_reason(e->waiting_reason);
    }
  }
  const double now = clock_.Now();
  for (moe::v1::Job& j : *out.mutable_jobs()) *j.mutable_goodput() = GoodputAt(j, now);
  return out;
}

Status Controller::Delete(const std::string& id, const std::string& actor) {
  MutexLock op(&op_mu_);
  MutexLock lock(&mu_);
  MOE_RETURN_IF_ERROR(jobs_.Delete(id));
  MOE_LOG(INFO) << "job " << id << " deleted" << (actor.empty() ? "" : " by " + actor);
  return OkStatus();
}

void Controller::ExpireFinishedJobs() {
  if (config_.finished_job_retention_seconds <= 0) return;
  const double cutoff = clock_.Now() - config_.finished_job_retention_seconds;
  for (JobEntry* e : jobs_.All()) {
    if (!IsTerminal(e->job.state()) || e->job.state() == moe::v1::INVALID ||
        e->job.updated_at() > cutoff || e->attempt) {
      continue;
    }
    const std::string id = e->job.id();
    if (Status st = jobs_.Delete(id); !st.ok()) {
      MOE_LOG(WARNING) << "job " << id << " is past its retention but not deleted: " << st;
      return;  // the next tick tries again
    }
  }
}

}  // namespace moe::controller
