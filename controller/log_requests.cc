#include "controller/log_requests.h"

#include "common/log.h"
#include "controller/controller_internal.h"
#include "controller/worker_claims.h"

namespace moe::controller {
namespace {

constexpr double kLogAnswerSeconds = 10;

}  // namespace

void LogRequests::Request(const moe::v1::GetLogsRequest& req, Done done) {
  JobEntry* e = jobs_.Find(req.job_id());
  if (e == nullptr) return done(NotFoundError("no job '" + req.job_id() + "'"));
  const int attempt = req.attempt() > 0 ? req.attempt() : e->job.attempt();
  if (attempt <= 0)
    return done(FailedPreconditionError("job " + req.job_id() + " has not run yet: no output"));
  std::vector<std::string> by_rank;
  if (auto it = e->attempt_workers.find(attempt); it != e->attempt_workers.end()) {
    by_rank = it->second;
  } else if (attempt ==
             e->job.attempt()) {  // recovered after a controller restart: the stored placement
    for (const Slot& s : internal::SlotsOf(e->job)) by_rank.push_back(s.worker);
  } else {
    return done(NotFoundError("attempt " + std::to_string(attempt) + " of " + req.job_id() +
                              ": this controller does not know where it ran (only attempts since "
                              "it started, and the latest)"));
  }
  if (req.rank() < 0 || req.rank() >= static_cast<int>(by_rank.size())) {
    return done(InvalidArgumentError("--rank: " + std::to_string(req.rank()) +
                                     " is not a rank of " + req.job_id() + " (0.." +
                                     std::to_string(static_cast<int>(by_rank.size()) - 1) + ")"));
  }
  const std::string& worker = by_rank[static_cast<size_t>(req.rank())];
  WorkerEntry* w = workers_.Find(worker);
  if (w == nullptr || w->channel == nullptr || w->lost) {
    return done(UnavailableError(
        "rank " + std::to_string(req.rank()) + " of attempt " + std::to_string(attempt) +
        " ran on worker " + worker +
        ", which is not connected: its output is in that worker's runtime directory"));
  }
  const uint64_t id = next_id_++;
  moe::v1::ControllerMessage m;
  auto* lr = m.mutable_logs();
  lr->set_request_id(id);
  lr->set_job_id(req.job_id());
  lr->set_attempt(attempt);
  lr->set_rank(req.rank());
  lr->set_tail_lines(req.tail_lines());
  lr->set_offset(req.offset());
  Pending& p = pending_[id];
  p.worker = worker;
  p.deadline = clock_.Monotonic() + kLogAnswerSeconds;
  p.done = std::move(done);
  p.response.set_attempt(attempt);
  p.response.set_worker(worker);
  w->channel->Send(m);
}

void LogRequests::Reply(const std::string& agent, const moe::v1::LogReply& r) {
  auto it = pending_.find(r.request_id());
  if (it == pending_.end() || AgentOfWorker(it->second.worker) != agent)
    return;  // late, or not this agent's to answer
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (!r.error().empty()) return p.done(NotFoundError(r.error().substr(0, kMaxMessageBytes)));
  p.response.set_text(r.text());
  p.response.set_next_offset(r.next_offset());
  p.response.set_ended(r.ended());
  p.done(std::move(p.response));
}

void LogRequests::Fail(const std::string& worker, double now, const std::string& why) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const bool match =
        !worker.empty() ? it->second.worker == worker : now <= 0 || now > it->second.deadline;
    if (!match) {
      ++it;
      continue;
    }
    Done done = std::move(it->second.done);
    const std::string from = it->second.worker;
    it = pending_.erase(it);
    done(UnavailableError("worker " + from + ": " + why));
  }
}

}  // namespace moe::controller
