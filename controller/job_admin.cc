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

void CopyBasicView(const moe::v1::Job& from, moe::v1::Job* to) {
  if (from.has_spec()) {  // each part as present as in `from`
    const moe::v1::TrainingJob& spec = from.spec();
    moe::v1::TrainingJob* basic = to->mutable_spec();
    if (spec.has_api_version()) basic->set_api_version(spec.api_version());
    if (spec.has_kind()) basic->set_kind(spec.kind());
    if (spec.has_metadata()) *basic->mutable_metadata() = spec.metadata();
    if (spec.has_spec()) {
      moe::v1::JobSpec* body = basic->mutable_spec();
      if (spec.spec().has_parallelism()) *body->mutable_parallelism() = spec.spec().parallelism();
    }
  }
  to->set_id(from.id());
  to->set_state(from.state());
  to->set_message(from.message());
  to->set_created_at(from.created_at());
  to->set_updated_at(from.updated_at());
  to->set_attempt(from.attempt());
  to->set_restarts(from.restarts());
  *to->mutable_placement() = from.placement();
  if (from.has_last_metrics()) *to->mutable_last_metrics() = from.last_metrics();
  *to->mutable_events() = from.events();
  to->set_request_id(from.request_id());
  if (from.has_last_eval()) *to->mutable_last_eval() = from.last_eval();
  to->set_planned_step_seconds(from.planned_step_seconds());
  to->set_plan_basis(from.plan_basis());
  to->set_waiting_reason(from.waiting_reason());
  to->set_checkpoint_step(from.checkpoint_step());
  if (from.has_summary()) *to->mutable_summary() = from.summary();
  to->set_owner(from.owner());
  if (from.has_goodput()) *to->mutable_goodput() = from.goodput();
  if (from.has_checkpoint_advice()) *to->mutable_checkpoint_advice() = from.checkpoint_advice();
  to->set_checkpoint_time(from.checkpoint_time());
  to->set_stop_state(from.stop_state());
}

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
  if (!moe::v1::JobView_IsValid(req.view())) {
    return InvalidArgumentError(
        "view: " + std::to_string(req.view()) +
        " is not a JobView (JOB_VIEW_BASIC, the default, or JOB_VIEW_FULL)");
  }
  const bool full = req.view() == moe::v1::JOB_VIEW_FULL;
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
      if (static_cast<size_t>(out.jobs_size()) >= limit) {
        out.set_next_page_token(PageToken(out.jobs(out.jobs_size() - 1)));
        break;
      }
      moe::v1::Job* j = out.add_jobs();
      if (full) {
        *j = e->job;
      } else {
        CopyBasicView(e->job, j);
      }
      if (IsQueued(j->state()) && !e->attempt) j->set_waiting_reason(e->waiting_reason);
      const size_t size = j->ByteSizeLong();  // the copy's: a basic one is a quarter of the job
      if (out.jobs_size() > 1 && bytes + size > kMaxPageBytes) {
        out.mutable_jobs()->RemoveLast();
        out.set_next_page_token(PageToken(out.jobs(out.jobs_size() - 1)));
        break;
      }
      bytes += size;
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
