// The attempt lifecycle: a queued job is placed (Schedule, StartAttempt), its ranks run, and the
// attempt ends when every rank has finished (SettleAttempt): SUCCEEDED when all did well, else the
// recorded failure decides (RESTARTING, then placed again, or FAILED). A failure (a rank's, a lost
// worker's) stops the other ranks at once, whether or not the store takes its record yet.
#include <algorithm>
#include <limits>
#include <set>

#include "common/job_spec_proto.h"
#include "common/log.h"
#include "controller/controller.h"
#include "controller/job_plan.h"
#include "controller/controller_internal.h"

namespace moe::controller {

using moe::v1::JobState;

Status Controller::StartAttempt(JobEntry& e, const std::vector<Slot>& slots) {
  const int number = e.job.attempt() + 1;
  std::vector<std::string>& by_rank = e.attempt_workers[number];  // a retried start writes it again
  by_rank.clear();
  for (const Slot& s : slots) by_rank.push_back(s.worker);
  const std::string what =
      "attempt " + std::to_string(number) + ": " + internal::RackSummary(slots);
  const std::optional<AttemptPlan> plan = PlanAttempt(config_, e.spec, slots);
  // Stored before any worker hears of it: a refused record leaves the job queued.
  MOE_RETURN_IF_ERROR(
      jobs_.Transition(e, moe::v1::SCHEDULED, "Scheduled", what, [&](moe::v1::Job& job) {
        job.set_attempt(number);
        internal::SetPlacement(job, slots);
        job.set_planned_step_seconds(plan ? plan->step_seconds : 0);
        job.set_plan_basis(plan ? plan->basis : "");
      }));
  e.attempt = std::make_unique<Attempt>();
  e.attempt->number = number;
  e.attempt->slots = slots;
  e.attempt->ranks.assign(slots.size(), RankStatus{});
  e.attempt->start_deadline = clock_.Monotonic() + config_.rank_start_seconds;
  for (size_t r = 0; r < slots.size(); ++r) {
    workers_.Assign(slots[r].worker, e.job.id(), number, static_cast<int>(r));
  }
  SendAssignments(e);
  return OkStatus();
}

void Controller::SendAssignments(const JobEntry& e) {
  const Attempt& a = *e.attempt;
  const std::string spec_json = SpecToJson(e.spec);
  for (size_t r = 0; r < a.slots.size(); ++r) {
    WorkerEntry* w = workers_.Find(a.slots[r].worker);
    if (w == nullptr || w->channel == nullptr) continue;  // placed on free slots: connected ones
    moe::v1::ControllerMessage m;
    auto* asg = m.mutable_assign();
    asg->set_job_id(e.job.id());
    asg->set_attempt(a.number);
    asg->set_rank(static_cast<int>(r));
    asg->set_world_size(static_cast<int>(a.slots.size()));
    asg->set_spec_json(spec_json);
    asg->set_rendezvous_prefix(internal::RendezvousPrefix(e.job.id(), a.number));
    asg->set_checkpoint_dir(e.spec.checkpoint.dir);
    asg->set_resume(true);
    asg->set_cpu_threads(workers_.CpuThreadsFor(a.slots[r].worker));
    w->channel->Send(m);
  }
}

void Controller::FailAttempt(JobEntry& e, const std::string& reason, bool permanent, bool counted, bool preempted) {
  if (!e.attempt || e.attempt->ending) return;  // already failing, or cancelled
  e.attempt->failure = AttemptFailure{reason, permanent, counted, /*event_stored=*/false, preempted};
  // No rank waits forever in a collective; on a requeue (not counted) they stop at the next step
  // boundary, all at the same one, and checkpoint there (moe-train on SIGTERM).
  StopRanks(e, reason);
  SettleOrRetry(e);
  schedule_needed_ = true;
}

void Controller::StopRanks(JobEntry& e, const std::string& reason, bool now) {
  Attempt& a = *e.attempt;
  a.ending = true;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    if (a.ranks[r].finished) continue;
    const std::string& name = a.slots[r].worker;
    WorkerEntry* w = workers_.Find(name);
    if (w == nullptr || w->lost || w->channel == nullptr) {
      // Nobody to tell: the rank is gone with its worker.
      a.ranks[r].finished = true;
      if (w != nullptr && w->job_id == e.job.id()) workers_.Release(name);
      continue;
    }
    w->channel->Send(internal::CancelMessage(e.job.id(), a.number, reason, now));
  }
}

void Controller::HandleFinished(const std::string& worker, const moe::v1::RankFinished& f) {
  WorkerEntry* w = workers_.Find(worker);
  if (w != nullptr && w->job_id == f.job_id() && w->attempt == f.attempt()) {
    workers_.Release(worker);
  }
  schedule_needed_ = true;
  JobEntry* e = AttemptOf(f.job_id(), f.attempt(), f.rank());
  if (e != nullptr) RankFinished(*e, f.rank(), f);
  Schedule();  // the freed worker (or a restart) may let a queued job go now
}

void Controller::RankFinished(JobEntry& e, int rank, const moe::v1::RankFinished& f) {
  RankStatus& rs = e.attempt->ranks[static_cast<size_t>(rank)];
  if (rs.finished) return;
  rs.finished = true;
  rs.ok = f.ok();
  if (!f.ok()) {
    const std::string why =
        f.message().empty() ? "exited with code " + std::to_string(f.exit_code()) : f.message();
    // The class comes from the rank's final record (common/rank_end.h): a permanent failure (a bad
    // spec, a checkpoint of another layout, no such device) would fail the same way after a restart.
    const bool permanent = f.failure_class() == moe::v1::FAILURE_PERMANENT;
    const std::string where = "rank " + std::to_string(rank) + " on worker " +
                              e.attempt->slots[static_cast<size_t>(rank)].worker;
    if (!IsTerminal(e.job.state())) FailAttempt(e, where + " failed: " + why, permanent);
    // A peer's transient failure (a closed connection) may have come first; the permanent cause wins.
    if (permanent && e.job.state() == moe::v1::RESTARTING && e.attempt->failure && e.attempt->failure->counted &&
        !e.attempt->failure->permanent) {
      e.attempt->failure->permanent = true;
      e.not_before = 0;
      if (Status st = jobs_.Transition(e, moe::v1::FAILED, "Failed",
                                       where + " failed: " + why + " (not retried: the job cannot run as specified)");
          !st.ok()) {
        MOE_LOG(WARNING) << "job " << e.job.id() << " stays RESTARTING: " << st;
      }
    }
  }
  SettleOrRetry(e);  // ends the attempt when this was its last rank
}

void Controller::WorkerLost(const std::string& name, const std::string& why) {
  const WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return;
  MOE_LOG(WARNING) << "worker " << name << " lost: " << why;
  if (!w->busy()) return;
  RankLost(name, "worker " + name + " (rank " + std::to_string(w->rank) + ", rack " +
                     w->info.rack() + ") lost: " + why);
}

void Controller::RankLost(const std::string& worker, const std::string& why) {
  WorkerEntry* w = workers_.Find(worker);
  if (w == nullptr || !w->busy()) return;
  const std::string job = w->job_id;
  const int attempt = w->attempt, rank = w->rank;
  workers_.Release(worker);
  schedule_needed_ = true;
  JobEntry* e = AttemptOf(job, attempt, rank);
  if (e == nullptr) return;
  RankStatus& rs = e->attempt->ranks[static_cast<size_t>(rank)];
  rs.finished = true;
  rs.ok = false;
  FailAttempt(*e, why);  // nothing more when the attempt was already ending
  SettleOrRetry(*e);     // ends it when this was its last rank
}

Status Controller::SettleAttempt(JobEntry& e) {
  Attempt& a = *e.attempt;
  const JobState state = e.job.state();
  const bool running = state == moe::v1::SCHEDULED || state == moe::v1::RUNNING;
  if (a.failure && running) MOE_RETURN_IF_ERROR(RecordFailure(e));  // not recorded yet
  if (a.live_ranks() > 0) return OkStatus();
  bool all_ok = !a.failure;
  for (const auto& r : a.ranks) all_ok = all_ok && r.ok;
  if (all_ok && running) {
    MOE_RETURN_IF_ERROR(jobs_.Transition(
        e, moe::v1::SUCCEEDED, "Succeeded",
        "all " + std::to_string(e.spec.parallelism.world_size) + " ranks finished"));
  }
  rendezvous_.ErasePrefix(internal::RendezvousPrefix(e.job.id(), a.number));
  e.attempt.reset();
  schedule_needed_ = true;
  return OkStatus();
}

Status Controller::RecordFailure(JobEntry& e) {
  AttemptFailure& f = *e.attempt->failure;
  if (!f.event_stored) {
    MOE_RETURN_IF_ERROR(jobs_.Event(e, f.counted ? "AttemptFailed" : f.preempted ? "AttemptPreempted" : "AttemptRequeued",
                                    "attempt " + std::to_string(e.attempt->number) + ": " + f.reason));
    f.event_stored = true;
  }
  if (f.permanent) {
    return jobs_.Transition(e, moe::v1::FAILED, "Failed",
                            f.reason + " (not retried: the job cannot run as specified)");
  }
  const int restarts = e.job.restarts();
  if (f.preempted) {
    return jobs_.Transition(e, moe::v1::PREEMPTED, "Preempted",
                            f.reason + "; back in the queue, it resumes from the checkpoint its ranks write as they stop "
                                       "(restart budget untouched: " + std::to_string(restarts) + " of " +
                                std::to_string(e.spec.max_restarts) + " used)");
  }
  if (!f.counted) {
    return jobs_.Transition(e, moe::v1::RESTARTING, "Requeued",
                            f.reason + "; resumes from the checkpoint its ranks write as they stop (restart budget untouched: " +
                                std::to_string(restarts) + " of " + std::to_string(e.spec.max_restarts) + " used)");
  }
  if (restarts < e.spec.max_restarts) {
    const double delay = RestartDelay(restarts + 1);
    MOE_RETURN_IF_ERROR(jobs_.Transition(e, moe::v1::RESTARTING, "Restarting",
                                         "restart " + std::to_string(restarts + 1) + " of " +
                                             std::to_string(e.spec.max_restarts) + " in " + internal::Seconds(delay) + " (" +
                                             f.reason + "); " + ResumePoint(e),
                                         [&](moe::v1::Job& job) { job.set_restarts(restarts + 1); }));
    e.not_before = delay > 0 ? clock_.Monotonic() + delay : 0;
    return OkStatus();
  }
  return jobs_.Transition(e, moe::v1::FAILED, "Failed",
                          f.reason + " (after " + std::to_string(restarts) +
                              " restart(s); max_restarts is " +
                              std::to_string(e.spec.max_restarts) + ")");
}

// restart_backoff_seconds doubled for each restart before the n-th, at most restart_backoff_max_seconds.
double Controller::RestartDelay(int n) const {
  double d = config_.restart_backoff_seconds;
  for (int k = 1; k < n && d < config_.restart_backoff_max_seconds; ++k) d *= 2;
  return std::min(d, config_.restart_backoff_max_seconds);
}

// Where a restart of the job begins, as its ranks reported (a checkpoint written since the last step
// report is newer: the ranks resume from the newest complete one they find).
std::string Controller::ResumePoint(const JobEntry& e) const {
  if (e.spec.checkpoint.dir.empty()) return "it starts over from step 0: checkpoints are off (no spec.checkpoint.dir)";
  if (e.job.checkpoint_step() > 0) return "it resumes from the checkpoint of step " + std::to_string(e.job.checkpoint_step());
  return "it starts over from step 0: no checkpoint reported yet (the ranks resume from one if it was written since)";
}

void Controller::SettleOrRetry(JobEntry& e) {
  if (!e.attempt) return;
  if (Status st = SettleAttempt(e); !st.ok()) {
    MOE_LOG(WARNING) << "job " << e.job.id() << ": the end of attempt " << e.attempt->number
                     << " is not stored yet: " << st << " (retried at the next tick)";
  }
}

JobEntry* Controller::AttemptOf(const std::string& job_id, int attempt, int rank) {
  JobEntry* e = jobs_.Find(job_id);
  if (e == nullptr || !e->attempt || e->attempt->number != attempt) return nullptr;
  if (rank < 0 || rank >= static_cast<int>(e->attempt->ranks.size())) return nullptr;
  return e;
}

}  // namespace moe::controller
