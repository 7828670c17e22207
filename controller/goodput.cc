#include "controller/goodput.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "planner/planner.h"

namespace moe::controller {
namespace {

using moe::v1::Goodput;
using moe::v1::JobState;

void Add(Goodput& g, const std::string& cause, double seconds) {
  if (seconds <= 0) return;
  if (cause == "productive") {
    g.set_productive_seconds(g.productive_seconds() + seconds);
  } else if (cause == "queued") {
    g.set_queued_seconds(g.queued_seconds() + seconds);
  } else if (cause == "starting") {
    g.set_starting_seconds(g.starting_seconds() + seconds);
  } else if (cause == "redone") {
    g.set_redone_seconds(g.redone_seconds() + seconds);
  } else if (cause == "checkpoint") {
    g.set_checkpoint_seconds(g.checkpoint_seconds() + seconds);
  } else if (cause == "backoff") {
    g.set_backoff_seconds(g.backoff_seconds() + seconds);
  } else if (cause == "preempted") {
    g.set_preempted_seconds(g.preempted_seconds() + seconds);
  } else if (cause == "evaluation") {
    g.set_evaluation_seconds(g.evaluation_seconds() + seconds);
  } else {
    return;  // "" (ended) or "running" (split at the step reports): nothing to count here
  }
  g.set_wall_seconds(g.wall_seconds() + seconds);
  g.set_ratio(g.productive_seconds() / g.wall_seconds());
}

// Closes [mark, now) of a waiting cause; a restart's back-off ends at backoff_until, the rest of
// the interval is queued.
void CloseWaiting(Goodput& g, double now) {
  const double span = std::max(0.0, now - g.mark());
  if (g.open_cause() == "backoff") {
    const double backoff = std::clamp(g.backoff_until() - g.mark(), 0.0, span);
    Add(g, "backoff", backoff);
    Add(g, "queued", span - backoff);
  } else {
    Add(g, g.open_cause(), span);
  }
}

std::string OpenCause(JobState state, const Goodput& g, double now) {
  switch (state) {
    case moe::v1::PENDING:
      return "queued";
    case moe::v1::SCHEDULED:
      return "starting";
    case moe::v1::RUNNING:
      return "running";
    case moe::v1::RESTARTING:
      return g.backoff_until() > now ? "backoff" : "queued";
    case moe::v1::PREEMPTED:
      return "preempted";
    case moe::v1::STOPPING:
      return "checkpoint";  // the ranks' stop and its save
    default:
      return "";  // ended
  }
}

// What a running attempt's time since its last step report was, when the job moves to `to`: the
// final save of a success or a cancel, the stop of a preemption, else work a restart redoes.
const char* TailCause(JobState to) {
  switch (to) {
    case moe::v1::SUCCEEDED:
    case moe::v1::CANCELLED:
    case moe::v1::STOPPING:
    case moe::v1::TIMEOUT:
      return "checkpoint";
    case moe::v1::PREEMPTED:
      return "preempted";
    default:
      return "redone";
  }
}

}  // namespace

void GoodputOnState(moe::v1::Job& job, double now) {
  Goodput& g = *job.mutable_goodput();
  if (g.mark() == 0 && g.open_cause().empty()) {  // a new job, or one stored before goodput
    g.set_mark(now);
    g.set_open_cause(OpenCause(job.state(), g, now));
    return;
  }
  if (g.open_cause() == "running") {  // the attempt stops (from RUNNING)
    Add(g, TailCause(job.state()), now - g.mark());
  } else if (!g.open_cause().empty()) {
    CloseWaiting(g, now);
  }
  g.set_mark(std::max(g.mark(), now));
  g.set_open_cause(OpenCause(job.state(), g, now));
}

void GoodputSetBackoff(moe::v1::Job& job, double until) {
  job.mutable_goodput()->set_backoff_until(until);
}

void GoodputOnStep(moe::v1::Job& job, const moe::v1::StepMetrics& m, double now) {
  Goodput& g = *job.mutable_goodput();
  if (g.open_cause() != "running") return;  // a report after the attempt stopped
  const double span = std::max(0.0, now - g.mark());
  const double checkpoint = std::clamp(m.checkpoint_stall_seconds(), 0.0, span);
  const double evaluation = std::clamp(m.eval_seconds(), 0.0, span - checkpoint);
  Add(g, "checkpoint", checkpoint);
  Add(g, "evaluation", evaluation);
  const double rest = span - checkpoint - evaluation;
  if (m.step() > g.counted_step()) {
    Add(g, "productive", rest);
    g.set_counted_step(m.step());
  } else {
    Add(g, "redone", rest);
  }
  g.set_mark(std::max(g.mark(), now));
}

moe::v1::Goodput GoodputAt(const moe::v1::Job& job, double now) {
  Goodput g = job.goodput();
  if (g.open_cause().empty() || g.open_cause() == "running" || now <= g.mark()) return g;
  CloseWaiting(g, now);
  g.set_mark(now);
  return g;
}

double GoodputLost(const moe::v1::Goodput& g, const char* cause) {
  const std::string c = cause;
  if (c == "queued") return g.queued_seconds();
  if (c == "starting") return g.starting_seconds();
  if (c == "redone") return g.redone_seconds();
  if (c == "checkpoint") return g.checkpoint_seconds();
  if (c == "backoff") return g.backoff_seconds();
  if (c == "preempted") return g.preempted_seconds();
  if (c == "evaluation") return g.evaluation_seconds();
  return 0;
}

double GoodputHeldSeconds(const moe::v1::Job& job, double now) {
  const Goodput& g = job.goodput();
  double held = g.starting_seconds() + g.productive_seconds() + g.redone_seconds() +
                g.checkpoint_seconds() + g.evaluation_seconds();
  if (g.open_cause() == "running" || g.open_cause() == "starting" || g.open_cause() == "checkpoint")
    held += std::max(0.0, now - g.mark());
  return held;
}

bool AdviseFromRun(const moe::v1::Job& job, int64_t devices, int64_t current_interval_steps,
                   double mtbf_hours, moe::v1::CheckpointAdvice* out) {
  const moe::v1::RunSummary& run = job.summary();
  if (!(mtbf_hours > 0) || run.measured_steps() <= 0 || devices <= 0) return false;
  const moe::v1::Goodput& g = job.goodput();
  const double step = run.step_seconds_sum() / static_cast<double>(run.measured_steps());
  const int64_t saves =
      current_interval_steps > 0 ? g.counted_step() / current_interval_steps : int64_t{0};
  CheckpointAdvice a;
  a.mtbf_hours_per_gpu = mtbf_hours;
  a.gpus = devices;
  a.system_mtbf_seconds = mtbf_hours * 3600 / static_cast<double>(devices);
  a.step_seconds = step;
  // No save measured yet: a tenth of a step, the asynchronous save's usual pause.
  a.stall_seconds = saves > 0 ? g.checkpoint_seconds() / static_cast<double>(saves) : 0.1 * step;
  a.restart_seconds =
      g.starting_seconds() / static_cast<double>(std::max<int64_t>(job.attempt(), 1));
  a.young_daly_seconds = YoungDalyInterval(a.stall_seconds, a.system_mtbf_seconds);
  a.interval_steps = static_cast<int64_t>(
      std::min(1e15, std::max(1.0, std::round(a.young_daly_seconds / std::max(step, 1e-9)))));
  auto predict = [&](int64_t steps) {
    CheckpointAdvice at = a;
    at.interval_steps = steps;
    at.interval_seconds = static_cast<double>(steps) * step;
    PredictGoodput(&at);
    return at.goodput;
  };
  out->set_mtbf_hours_per_device(mtbf_hours);
  out->set_devices(devices);
  out->set_step_seconds(step);
  out->set_stall_seconds(a.stall_seconds);
  out->set_restart_seconds(a.restart_seconds);
  out->set_young_daly_seconds(a.young_daly_seconds);
  out->set_interval_steps(a.interval_steps);
  out->set_goodput(predict(a.interval_steps));
  out->set_current_interval_steps(current_interval_steps);
  if (current_interval_steps > 0) out->set_current_goodput(predict(current_interval_steps));
  return true;
}

}  // namespace moe::controller
