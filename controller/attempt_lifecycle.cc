#include "controller/attempt_lifecycle.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "controller/controller_internal.h"
#include "controller/goodput.h"
#include "controller/job_plan.h"
#include "controller/worker_claims.h"

namespace moe::controller {

using moe::v1::JobState;

JobManager::TransitionRequest AttemptLifecycle::StartRequest(JobEntry& e,
                                                             const std::vector<Slot>& slots) {
  const int number = e.job.attempt() + 1;
  std::vector<std::string>& by_rank = e.attempt_workers[number];  // a retried start writes it again
  by_rank.clear();
  for (const Slot& s : slots) by_rank.push_back(s.worker);
  std::string what = "attempt " + std::to_string(number) + ": " + internal::RackSummary(slots);
  std::optional<AttemptPlan> plan = PlanAttempt(config_, e.spec, slots);
  return {&e, moe::v1::SCHEDULED, "Scheduled", std::move(what),
          [number, slots, par = e.spec.parallelism, plan = std::move(plan)](moe::v1::Job& job) {
            job.set_attempt(number);
            internal::SetPlacement(job, par, slots);
            job.set_planned_step_seconds(plan ? plan->step_seconds : 0);
            job.set_plan_basis(plan ? plan->basis : "");
          }};
}

void AttemptLifecycle::Started(JobEntry& e, const std::vector<Slot>& slots) {
  const int number = e.job.attempt();
  e.attempt = std::make_unique<Attempt>();
  jobs_.AttemptChanged(e);
  e.attempt->number = number;
  e.attempt->slots = slots;
  e.attempt->ranks.assign(slots.size(), RankStatus{});
  e.attempt->start_deadline = clock_.Monotonic() + config_.rank_start_seconds;
  e.attempt->placed_at = clock_.Monotonic();
  for (size_t r = 0; r < slots.size(); ++r) {
    workers_.Assign(slots[r].worker, e.job.id(), number, static_cast<int>(r));
  }
  SendAssignments(e);
}

Status AttemptLifecycle::Start(JobEntry& e, const std::vector<Slot>& slots) {
  return StartAll({{&e, slots}});
}

Status AttemptLifecycle::StartAll(const std::vector<Placement>& starts) {
  std::vector<JobManager::TransitionRequest> records;
  records.reserve(starts.size());
  for (const Placement& p : starts) records.push_back(StartRequest(*p.e, p.slots));
  // Stored before any worker hears of them: a refused record leaves the jobs queued.
  MOE_RETURN_IF_ERROR(jobs_.TransitionAll(records));
  for (const Placement& p : starts) Started(*p.e, p.slots);
  return OkStatus();
}

// Each rank gets the job's typed spec as this attempt runs it: its world size is the attempt's (an
// elastic job may run smaller than it asked for), and the spec is the only place the rank reads its
// world size and checkpoint directory from.
void AttemptLifecycle::SendAssignments(const JobEntry& e) {
  const Attempt& a = *e.attempt;
  moe::v1::ControllerMessage m;
  auto* asg = m.mutable_assign();
  asg->set_job_id(e.job.id());
  asg->set_attempt(a.number);
  *asg->mutable_spec() = e.job.spec();
  asg->mutable_spec()->mutable_spec()->mutable_parallelism()->set_world_size(
      static_cast<int64_t>(a.slots.size()));
  asg->set_rendezvous_prefix(internal::RendezvousPrefix(e.job.id(), a.number));
  asg->set_resume(true);
  asg->set_epoch(epoch_);
  asg->set_owner(e.job.owner());
  for (size_t r = 0; r < a.slots.size(); ++r) {
    WorkerEntry* w = workers_.Find(a.slots[r].worker);
    if (w == nullptr || w->channel == nullptr) continue;  // placed on free slots: connected ones
    asg->set_rank(static_cast<int>(r));
    asg->set_cpu_threads(workers_.CpuThreadsFor(a.slots[r].worker));
    asg->set_worker(a.slots[r].worker);  // the agent's device it runs on
    asg->set_device_index(w->info.device_index());
    w->channel->Send(m);
  }
}

Status AttemptLifecycle::AwaitReconnect(JobEntry& e) {
  const int grace = static_cast<int>(config_.reconnect_grace_seconds);
  MOE_RETURN_IF_ERROR(
      jobs_.Event(e, "ControllerRestarted",
                  "waiting for its ranks to report back: " + std::to_string(grace) +
                      " s once the controller serves and the workers' registrations are over"));
  e.attempt = std::make_unique<Attempt>();
  jobs_.AttemptChanged(e);
  e.attempt->number = e.job.attempt();
  e.attempt->slots = internal::SlotsOf(e.job);
  RankStatus running;
  running.started = true;  // it ran before the restart; CheckReconnect watches it now
  e.attempt->ranks.assign(e.attempt->slots.size(), running);
  e.attempt->reconnect_deadline = clock_.Monotonic() + config_.reconnect_grace_seconds;
  e.attempt->placed_at = clock_.Monotonic();
  // Its workers stay busy with it: one that reconnects is given no new work until it has reported
  // the rank (or come back without it: the rank is lost) or the grace has passed.
  for (size_t r = 0; r < e.attempt->slots.size(); ++r) {
    workers_.Assign(e.attempt->slots[r].worker, e.job.id(), e.attempt->number, static_cast<int>(r));
  }
  return OkStatus();
}

void AttemptLifecycle::Stop(JobEntry& e, const std::string& reason, StopCause cause) {
  if (!e.attempt || e.attempt->ending) return;  // already failing, or cancelled
  e.attempt->failure = AttemptFailure{reason, cause, /*event_stored=*/false};
  // No rank waits forever in a collective; on a requeue they stop at the next step boundary, all at
  // the same one, and checkpoint there (moe-train on SIGTERM).
  StopRanks(e, reason);
  SettleOrRetry(e);
  schedule_needed_ = true;
}

void AttemptLifecycle::StopRanks(JobEntry& e, const std::string& reason, bool now) {
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

void AttemptLifecycle::RankStarted(const std::string& job_id, int attempt, int rank) {
  if (JobEntry* e = AttemptOf(job_id, attempt, rank))
    e->attempt->ranks[static_cast<size_t>(rank)].started = true;
}

void AttemptLifecycle::RankFinished(const std::string& worker, const moe::v1::RankFinished& f) {
  WorkerEntry* w = workers_.Find(worker);
  if (w != nullptr && w->job_id == f.job_id() && w->attempt == f.attempt())
    workers_.Release(worker);
  schedule_needed_ = true;
  JobEntry* e = AttemptOf(f.job_id(), f.attempt(), f.rank());
  if (e == nullptr) return;
  // Success is believed only where the job's own record bears it out: the rank has the final
  // checkpoint, and the steps reached the total (reported in this attempt, or checkpointed there
  // already). A success before the last step's report is held for it (kPendingOkSeconds); one
  // without the final checkpoint is a failure of this attempt: a worker's word is not a finished
  // job.
  const int64_t total = e->spec.training.steps;
  if (f.ok() && f.checkpoint_step() < total) return RankEnded(*e, f.rank(), Doubted(*e, f));
  if (f.ok() && e->attempt->last_step < total && e->job.checkpoint_step() < total) {
    e->attempt->pending_ok[f.rank()] = f;
    if (e->attempt->pending_deadline == 0)
      e->attempt->pending_deadline = clock_.Monotonic() + kPendingOkSeconds;
    return;
  }
  RankEnded(*e, f.rank(), f);
}

moe::v1::RankFinished AttemptLifecycle::Doubted(const JobEntry& e, const moe::v1::RankFinished& f) {
  moe::v1::RankFinished doubted = f;
  doubted.set_ok(false);
  doubted.set_failure_class(moe::v1::FAILURE_TRANSIENT);
  doubted.set_message("reported success at step " + std::to_string(e.attempt->last_step) + " of " +
                      std::to_string(e.spec.training.steps) + " with checkpoint " +
                      std::to_string(f.checkpoint_step()) +
                      ": not believed (a rank succeeds after the last step, with its final "
                      "checkpoint)");
  MOE_LOG(WARNING) << "job " << e.job.id() << ": rank " << f.rank() << " " << doubted.message();
  return doubted;
}

// The successes held for the last step: believed once it came, doubted at the deadline.
void AttemptLifecycle::SettlePendingOk(JobEntry& e, double now) {
  if (!e.attempt || e.attempt->pending_ok.empty()) return;
  const bool reached = e.attempt->last_step >= e.spec.training.steps;
  if (!reached && now < e.attempt->pending_deadline) return;
  std::map<int, moe::v1::RankFinished> pending = std::move(e.attempt->pending_ok);
  e.attempt->pending_ok.clear();
  e.attempt->pending_deadline = 0;
  for (const auto& [rank, f] : pending) {
    if (!e.attempt) break;  // the attempt settled
    RankEnded(e, rank, reached ? f : Doubted(e, f));
  }
}

void AttemptLifecycle::RankEnded(JobEntry& e, int rank, const moe::v1::RankFinished& f) {
  RankStatus& rs = e.attempt->ranks[static_cast<size_t>(rank)];
  if (rs.finished) return;
  rs.finished = true;
  rs.ok = f.ok();
  if (f.ok() || f.failure_class() == moe::v1::FAILURE_STOPPED) {  // it ended with its record
    int64_t& c = e.attempt->end_checkpoint;
    c = c < 0 ? f.checkpoint_step() : std::min(c, f.checkpoint_step());
    ++e.attempt->end_records;
  }
  if (!f.ok()) {
    const std::string why =
        f.message().empty() ? "exited with code " + std::to_string(f.exit_code()) : f.message();
    // The class comes from the rank's final record (common/rank_end.h): a permanent failure (a bad
    // spec, a checkpoint of another layout, no such device) would fail the same way after a
    // restart.
    const bool permanent = f.failure_class() == moe::v1::FAILURE_PERMANENT;
    const std::string where = "rank " + std::to_string(rank) + " on worker " +
                              e.attempt->slots[static_cast<size_t>(rank)].worker;
    if (!IsTerminal(e.job.state()))
      Stop(e, where + " failed: " + why, permanent ? StopCause::kPermanent : StopCause::kFailure);
    // A peer's transient failure (a closed connection) may have come first; the permanent cause
    // wins.
    AttemptFailure* failure = e.attempt && e.attempt->failure ? &*e.attempt->failure : nullptr;
    if (permanent && e.job.state() == moe::v1::RESTARTING && failure != nullptr &&
        failure->cause == StopCause::kFailure) {
      failure->cause = StopCause::kPermanent;
      e.not_before = 0;
      if (Status st = jobs_.Transition(
              e, moe::v1::FAILED, "Failed",
              where + " failed: " + why + " (not retried: the job cannot run as specified)");
          !st.ok()) {
        MOE_LOG(WARNING) << "job " << e.job.id() << " stays RESTARTING: " << st;
      }
    }
  }
  SettleOrRetry(e);  // ends the attempt when this was its last rank
}

void AttemptLifecycle::Step(const moe::v1::StepReport& s) {
  JobEntry* e = AttemptOf(s.job_id(), s.attempt(), s.rank());
  if (e == nullptr || e->attempt->ending) return;
  e->attempt->ranks[static_cast<size_t>(s.rank())].started = true;
  if (!StepFiguresPlausible(s.metrics())) {
    MOE_LOG(WARNING)
        << "job " << e->job.id() << ": step " << s.metrics().step() << " of rank " << s.rank()
        << " dropped: implausible figures (non-finite or negative times, MFU above 1.5)";
    return;
  }
  const std::string implausible = ImplausibleStep(s.metrics(), e->spec, e->attempt->last_step,
                                                  clock_.Monotonic() - e->attempt->placed_at);
  if (!implausible.empty()) {
    MOE_LOG(WARNING) << "job " << e->job.id() << ": step " << s.metrics().step() << " of rank "
                     << s.rank() << " on attempt " << s.attempt() << " dropped: " << implausible;
    return;
  }
  e->attempt->last_step = s.metrics().step();  // held successes are settled by the next tick
  if (e->job.state() == moe::v1::SCHEDULED) {
    const std::string what = "attempt " + std::to_string(e->attempt->number) + " is training";
    if (Status st = jobs_.Transition(*e, moe::v1::RUNNING, "Running", what); !st.ok()) {
      MOE_LOG(WARNING) << "job " << e->job.id() << " stays SCHEDULED: " << st
                       << " (the next step report retries)";
    }
  }
  std::vector<StragglerChange> changes;
  auto job_metrics = metrics_.OnStep(s.job_id(), s.attempt(), s.rank(), s.metrics(), &changes);
  for (const auto& c : changes) RecordStraggler(*e, c);
  if (!job_metrics) return;
  if (Status st = jobs_.PublishMetrics(*e, *job_metrics); !st.ok()) {
    MOE_LOG(WARNING) << "job " << e->job.id() << ": metrics of step " << job_metrics->step()
                     << " not stored: " << st << " (the next step's metrics replace them)";
  }
}

void AttemptLifecycle::RecordStraggler(JobEntry& e, const StragglerChange& c) {
  const Slot& slot = e.attempt->slots[static_cast<size_t>(c.rank)];
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.2f", c.ratio);
  const std::string what = "rank " + std::to_string(c.rank) + " on " + slot.worker + " (rack " +
                           slot.rack + ", node " + slot.node + "): compute time " + ratio +
                           "x the job's median";
  if (Status st = jobs_.Event(e, c.flagged ? "Straggler" : "StragglerRecovered", what); !st.ok()) {
    // The flag itself is in every step's metrics and on /metrics (moe_job_straggler); only the
    // history misses this line.
    MOE_LOG(WARNING) << "job " << e.job.id() << ": straggler event not stored: " << st << " ("
                     << what << ")";
  }
}

void AttemptLifecycle::WorkerLost(const std::string& name, const std::string& why) {
  const WorkerEntry* w = workers_.Find(name);
  if (w == nullptr) return;
  MOE_LOG(WARNING) << "worker " << name << " lost: " << why;
  if (!w->busy()) return;
  RankLost(name, "worker " + name + " (rank " + std::to_string(w->rank) + ", rack " +
                     w->info.rack() + ") lost: " + why);
}

void AttemptLifecycle::RankLost(const std::string& worker, const std::string& why) {
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
  Stop(*e, why);      // nothing more when the attempt was already ending
  SettleOrRetry(*e);  // ends it when this was its last rank
}

Status AttemptLifecycle::Settle(JobEntry& e) {
  Attempt& a = *e.attempt;
  const JobState state = e.job.state();
  const bool running = state == moe::v1::SCHEDULED || state == moe::v1::RUNNING;
  if (a.failure && running) MOE_RETURN_IF_ERROR(RecordFailure(e));  // not recorded yet
  if (a.live_ranks() > 0) return OkStatus();
  bool all_ok = !a.failure;
  for (const auto& r : a.ranks) all_ok = all_ok && r.ok;
  if (all_ok && (running || state == moe::v1::STOPPING)) {
    const int64_t saved = a.end_checkpoint;
    MOE_RETURN_IF_ERROR(jobs_.Transition(
        e, moe::v1::SUCCEEDED, "Succeeded",
        "all " + std::to_string(a.ranks.size()) + " ranks finished", [saved](moe::v1::Job& job) {
          // The final save comes after the last step report: the ranks' own word has it.
          if (saved > job.checkpoint_step()) job.set_checkpoint_step(saved);
        }));
  } else if (state == moe::v1::STOPPING) {
    MOE_RETURN_IF_ERROR(SettleStopped(e));
  } else if (a.end_records == a.ranks.size()) {
    // Preempted or requeued, every rank stopped with its record: their stop checkpoint (written at
    // the step boundary after the last report) is the job's newest, and where it resumes.
    MOE_RETURN_IF_ERROR(jobs_.RecordCheckpoint(e, a.end_checkpoint));
  }
  rendezvous_.ErasePrefix(internal::RendezvousPrefix(e.job.id(), a.number));
  e.attempt.reset();
  jobs_.AttemptChanged(e);
  schedule_needed_ = true;
  return OkStatus();
}

Status AttemptLifecycle::BeginStop(JobEntry& e, JobState final_state, const std::string& reason) {
  MOE_RETURN_IF_ERROR(
      jobs_.Transition(e, moe::v1::STOPPING, "Stopping", reason,
                       [&](moe::v1::Job& job) { job.set_stop_state(final_state); }));
  StopRanks(e, reason);
  SettleOrRetry(e);  // ends it at once when no rank was left to stop
  schedule_needed_ = true;
  return OkStatus();
}

Status AttemptLifecycle::SettleStopped(JobEntry& e) {
  const JobState to =
      e.job.stop_state() == moe::v1::TIMEOUT ? moe::v1::TIMEOUT : moe::v1::CANCELLED;
  const int64_t saved = std::max<int64_t>(e.attempt->end_checkpoint, e.job.checkpoint_step());
  const std::string where =
      saved > 0 ? "; its checkpoint is step " + std::to_string(saved)
                : (e.spec.checkpoint.dir.empty() ? "; no checkpoint (checkpoints are off)"
                                                 : "; no checkpoint was written");
  return jobs_.Transition(e, to, to == moe::v1::TIMEOUT ? "TimedOut" : "Cancelled",
                          "every rank stopped" + where + " (" + e.job.message() + ")",
                          [saved](moe::v1::Job& job) { job.set_checkpoint_step(saved); });
}

namespace {

const char* FailureEvent(StopCause c) {
  switch (c) {
    case StopCause::kRequeue:
      return "AttemptRequeued";
    case StopCause::kPreempted:
      return "AttemptPreempted";
    default:
      return "AttemptFailed";
  }
}

}  // namespace

Status AttemptLifecycle::RecordFailure(JobEntry& e) {
  AttemptFailure& f = *e.attempt->failure;
  if (!f.event_stored) {
    MOE_RETURN_IF_ERROR(
        jobs_.Event(e, FailureEvent(f.cause),
                    "attempt " + std::to_string(e.attempt->number) + ": " + f.reason));
    f.event_stored = true;
  }
  const int restarts = e.job.restarts();
  const std::string budget = "(restart budget untouched: " + std::to_string(restarts) + " of " +
                             std::to_string(e.spec.max_restarts) + " used)";
  switch (f.cause) {
    case StopCause::kPermanent:
      return jobs_.Transition(e, moe::v1::FAILED, "Failed",
                              f.reason + " (not retried: the job cannot run as specified)");
    case StopCause::kPreempted:
      return jobs_.Transition(
          e, moe::v1::PREEMPTED, "Preempted",
          f.reason +
              "; back in the queue, it resumes from the checkpoint its ranks write as they stop " +
              budget);
    case StopCause::kRequeue:
      return jobs_.Transition(
          e, moe::v1::RESTARTING, "Requeued",
          f.reason + "; resumes from the checkpoint its ranks write as they stop " + budget);
    case StopCause::kFailure:
      break;
  }
  if (restarts < e.spec.max_restarts) {
    const double delay = RestartDelay(restarts + 1);
    MOE_RETURN_IF_ERROR(jobs_.Transition(
        e, moe::v1::RESTARTING, "Restarting",
        "restart " + std::to_string(restarts + 1) + " of " + std::to_string(e.spec.max_restarts) +
            " in " + internal::Seconds(delay) + " (" + f.reason + "); " + ResumePoint(e),
        [&](moe::v1::Job& job) {
          job.set_restarts(restarts + 1);
          GoodputSetBackoff(job, clock_.Now() + delay);  // goodput's back-off cause
        }));
    e.not_before = delay > 0 ? clock_.Monotonic() + delay : 0;
    return OkStatus();
  }
  return jobs_.Transition(e, moe::v1::FAILED, "Failed",
                          f.reason + " (after " + std::to_string(restarts) +
                              " restart(s); max_restarts is " +
                              std::to_string(e.spec.max_restarts) + ")");
}

// restart_backoff_seconds doubled for each restart before the n-th, at most
// restart_backoff_max_seconds.
double AttemptLifecycle::RestartDelay(int n) const {
  double d = config_.restart_backoff_seconds;
  for (int k = 1; k < n && d < config_.restart_backoff_max_seconds; ++k) d *= 2;
  return std::min(d, config_.restart_backoff_max_seconds);
}

// Where a restart of the job begins, as its ranks reported (a checkpoint written since the last
// step report is newer: the ranks resume from the newest complete one they find).
std::string AttemptLifecycle::ResumePoint(const JobEntry& e) const {
  if (e.spec.checkpoint.dir.empty())
    return "it starts over from step 0: checkpoints are off (no spec.checkpoint.dir)";
  if (e.job.checkpoint_step() > 0)
    return "it resumes from the checkpoint of step " + std::to_string(e.job.checkpoint_step());
  return "it starts over from step 0: no checkpoint reported yet (the ranks resume from one if it "
         "was written since)";
}

void AttemptLifecycle::SettleOrRetry(JobEntry& e) {
  if (!e.attempt) return;
  if (Status st = Settle(e); !st.ok()) {
    MOE_LOG(WARNING) << "job " << e.job.id() << ": the end of attempt " << e.attempt->number
                     << " is not stored yet: " << st << " (retried at the next tick)";
  }
}

void AttemptLifecycle::CheckDeadlines(JobEntry& e, double now) {
  if (e.attempt && e.attempt->reconnect_deadline != 0) CheckReconnect(e, now);
  if (e.attempt && e.attempt->start_deadline != 0) CheckRankStarts(e, now);
  SettlePendingOk(e, now);
  if (e.spec.time_limit > 0) CheckTimeLimit(e);
}

// spec.time_limit: the seconds the job held workers, over its attempts (goodput's starting,
// productive, redone, checkpoint and evaluation time); queued, back-off and preempted time do not
// count. A running attempt stops with a checkpoint; a job waiting to restart ends at once.
void AttemptLifecycle::CheckTimeLimit(JobEntry& e) {
  const JobState s = e.job.state();
  const bool live = (s == moe::v1::SCHEDULED || s == moe::v1::RUNNING) && e.attempt &&
                    !e.attempt->ending && e.attempt->reconnect_deadline == 0;
  const bool waiting = (s == moe::v1::RESTARTING || s == moe::v1::PREEMPTED) && !e.attempt;
  if (!live && !waiting) return;
  const double used = GoodputHeldSeconds(e.job, clock_.Now());
  if (used < e.spec.time_limit) return;
  const std::string why = "time limit of " + internal::Seconds(e.spec.time_limit) + " reached (" +
                          internal::Seconds(used) + " on workers over " +
                          std::to_string(e.job.attempt()) + " attempt(s))";
  const Status st =
      live ? BeginStop(e, moe::v1::TIMEOUT, why + ": ranks checkpoint at their next step and stop")
           : jobs_.Transition(e, moe::v1::TIMEOUT, "TimedOut", why + "; not started again");
  if (!st.ok()) {
    MOE_LOG(WARNING) << "job " << e.job.id() << ": time limit reached, stop not stored yet: " << st
                     << " (retried at the next tick)";
  }
}

// After a controller restart: an attempt carries on once all its ranks reported back, and fails
// when some did not by the deadline.
void AttemptLifecycle::CheckReconnect(JobEntry& e, double now) {
  Attempt& a = *e.attempt;
  std::vector<int> missing;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const WorkerEntry* w = workers_.Find(a.slots[r].worker);
    const bool back = w != nullptr && !w->lost && w->job_id == e.job.id() && w->attempt == a.number;
    if (!back && !a.ranks[r].finished) missing.push_back(static_cast<int>(r));
  }
  if (missing.empty()) {
    const std::string what = "all " + std::to_string(a.ranks.size()) +
                             " ranks reported back; attempt " + std::to_string(a.number) +
                             " carries on";
    if (Status st = jobs_.Event(e, "Reconnected", what); !st.ok()) {
      MOE_LOG(WARNING) << "job " << e.job.id() << ": " << st << " (the next tick records it again)";
      return;
    }
    a.reconnect_deadline = 0;
    return;
  }
  // After the herd: the grace runs from the moment the registration gate had nothing left to do
  // (the server opened, no registration in flight, every refused agent's time to come back passed),
  // not from the restart, so a loaded machine that admits 16,384 agents slowly, or serves only
  // seconds after it loaded its state, counts none of them lost while they are in its queue.
  // Bounded: an agent that keeps reconnecting and failing holds a lost rank's restart at most the
  // longest wait the gate hands out (300 s) after the server opened.
  if (herd_ != nullptr) {
    const double quiet =
        std::min(herd_->QuietSince(), herd_->OpenedAt() + RegistrationGate::kMaxRetrySeconds);
    a.reconnect_deadline = std::max(a.reconnect_deadline, quiet + config_.reconnect_grace_seconds);
  }
  if (now <= a.reconnect_deadline) return;
  a.reconnect_deadline = 0;
  for (int r : missing) a.ranks[static_cast<size_t>(r)].finished = true;
  const size_t first = static_cast<size_t>(missing.front());
  Stop(e, std::to_string(missing.size()) +
              " rank(s) did not report back after the controller restarted (rank " +
              std::to_string(missing.front()) + " on " + a.slots[first].worker + ")");
}

void AttemptLifecycle::CheckRankStarts(JobEntry& e, double now) {
  Attempt& a = *e.attempt;
  if (a.ending || now < a.start_deadline) return;
  a.start_deadline = 0;
  std::string first;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    if (a.ranks[r].started || a.ranks[r].finished) continue;
    // Nothing to wait for: the rank never ran, so its end will not be reported.
    a.ranks[r].finished = true;
    if (const WorkerEntry* w = workers_.Find(a.slots[r].worker);
        w != nullptr && w->job_id == e.job.id()) {
      workers_.Release(a.slots[r].worker);
    }
    if (first.empty()) first = "rank " + std::to_string(r) + " on worker " + a.slots[r].worker;
  }
  if (first.empty()) return;
  schedule_needed_ = true;
  Stop(e, first + " did not start within " +
              std::to_string(static_cast<int>(config_.rank_start_seconds)) +
              " s of its assignment");
}

JobEntry* AttemptLifecycle::AttemptOf(const std::string& job_id, int attempt, int rank) {
  JobEntry* e = jobs_.Find(job_id);
  if (e == nullptr || !e->attempt || e->attempt->number != attempt) return nullptr;
  if (rank < 0 || rank >= static_cast<int>(e->attempt->ranks.size())) return nullptr;
  return e;
}

}  // namespace moe::controller
