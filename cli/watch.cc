#include "cli/watch.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "cli/format.h"
#include "cli/object_form.h"
#include "common/escape.h"
#include "common/job_state.h"

namespace moe::cli {
namespace {

std::string ClockTime(double t) {
  const time_t s = static_cast<time_t>(t);
  tm local;
  localtime_r(&s, &local);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &local);
  return buf;
}

int ExitCodeOf(moe::v1::JobState s) {
  if (s == moe::v1::SUCCEEDED) return 0;
  return s == moe::v1::CANCELLED ? 11 : 10;
}

// What a text watch prints as the messages arrive.
class TextPrinter {
 public:
  void Job(const moe::v1::Job& j) {
    if (!first_snapshot_) return;
    std::printf("watching %s (%s)\n", j.id().c_str(), StateName(j.state()).c_str());
    first_snapshot_ = false;
  }
  void Event(const moe::v1::JobEvent& e) {
    EndLine();
    std::printf("%s  %-12s %-10s %s\n", ClockTime(e.time()).c_str(), e.type().c_str(),
                StateName(e.state()).c_str(), EscapeControl(e.message()).c_str());
  }
  void Metrics(const moe::v1::StepMetrics& m) {
    saw_metrics_ = true;
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
      // A step with a validation result keeps its line; the others overwrite each other.
      std::printf("\r%s\033[K%s", ProgressLine(m).c_str(), m.has_eval_loss() ? "\n" : "");
      line_open_ = !m.has_eval_loss();
    } else if (now - last_print_ > std::chrono::seconds(5) || m.step() == m.total_steps() ||
               m.has_eval_loss()) {
      std::printf("%s\n", ProgressLine(m).c_str());
      last_print_ = now;
    }
  }
  void EndLine() {
    if (line_open_) std::printf("\n");
    line_open_ = false;
  }
  // Attached after the last step (a short job, a late watch): the job's last step, from its record.
  void FinalLine(const moe::v1::Job& last) {
    if (saw_metrics_ || last.last_metrics().step() <= 0) return;
    std::printf("%s\n", ProgressLine(last.last_metrics()).c_str());
  }
  // From the job's record (RunSummary: every step the controller saw, whenever this watch
  // attached): the loss from the first step to the last, and means over the measured steps.
  static void Summary(const moe::v1::Job& last) {
    std::printf("%s %s", last.id().c_str(), StateName(last.state()).c_str());
    if (!last.message().empty()) std::printf(": %s", EscapeControl(last.message()).c_str());
    std::printf("\n");
    const auto& m = last.last_metrics();
    const auto& s = last.summary();
    if (m.step() <= 0 || s.reported_steps() == 0) return;
    const double n = static_cast<double>(std::max<int64_t>(1, s.measured_steps()));
    std::printf(
        "summary: steps %lld-%lld, loss %.4f -> %.4f, mean %.4f TFLOP/s per device, MFU %.1f%% "
        "(against %s), "
        "%.0f tokens/s, %.3f s/step over %lld step(s), %d restart(s)%s\n",
        static_cast<long long>(s.first_step()), static_cast<long long>(m.step()), s.first_loss(),
        m.loss(), s.tflops_sum() / n, s.mfu_sum() / n * 100, m.mfu_peak_source().c_str(),
        s.tokens_per_second_sum() / n, s.step_seconds_sum() / n,
        static_cast<long long>(s.measured_steps()), last.restarts(),
        last.checkpoint_step() > 0
            ? (", last checkpoint reported at step " + std::to_string(last.checkpoint_step()))
                  .c_str()
            : "");
  }

 private:
  const bool tty_ = ::isatty(STDOUT_FILENO);
  bool line_open_ = false, first_snapshot_ = true, saw_metrics_ = false;
  std::chrono::steady_clock::time_point last_print_ =
      std::chrono::steady_clock::now() - std::chrono::hours(1);
};

}  // namespace

namespace {

// One attachment of a watch: reads until the stream ends; events at or below *last_seq (seen before
// a reconnect) are skipped.
grpc::Status Attach(Client& c, const std::string& id, bool json, int64_t* last_seq,
                    moe::v1::Job* last, bool* have_job, TextPrinter& text, Reconnect& again) {
  moe::v1::WatchJobRequest req;
  req.set_id(id);
  req.set_after_seq(*last_seq);
  grpc::ClientContext ctx;
  PrepareContext(&ctx, c.options, 0);  // as long as the job runs
  auto reader = c.stub->WatchJob(&ctx, req);
  moe::v1::WatchJobResponse r;
  bool reached = false;
  while (reader->Read(&r)) {
    if (!reached) again.Reached(), reached = true;
    if (r.has_event()) {
      if (r.event().seq() <= *last_seq) continue;  // an older controller sends every event again
      *last_seq = r.event().seq();
    }
    if (r.has_job()) *last = r.job(), *have_job = true;
    if (json) {  // one JSON object per line: for scripts (every step's metrics, every event)
      std::printf("%s\n", EscapeHiddenAsUnicode(ToJson(ObjectNode(r))).c_str());
    } else if (r.has_job()) {
      text.Job(r.job());
    } else if (r.has_event()) {
      text.Event(r.event());
    } else if (r.has_metrics()) {
      text.Metrics(r.metrics());
    }
    std::fflush(stdout);
  }
  return reader->Finish();
}

}  // namespace

int Watch(Client& c, const std::string& id, bool json, double reconnect_seconds) {
  moe::v1::Job last;
  bool have_job = false;
  int64_t last_seq = 0;
  TextPrinter text;
  Reconnect again(reconnect_seconds);
  while (true) {
    const grpc::Status st = Attach(c, id, json, &last_seq, &last, &have_job, text, again);
    // A stream that ended before the job did (the controller stopped: a restart, a takeover)
    // is lost, not over, as one cut by UNAVAILABLE is.
    Status why = FromGrpc(st);
    if (have_job && !IsTerminal(last.state()) &&
        (st.ok() || st.error_code() == grpc::StatusCode::CANCELLED)) {
      why = UnavailableError(st.ok() ? "the stream ended before the job did" : st.error_message());
    }
    if (why.ok()) break;
    text.EndLine();
    // With several controllers, the next attach goes to the next one when this one refused as a
    // standby or could not be reached (the leader moved).
    if (have_job && again.Retry(why)) {
      (void)c.FollowLeader(why);
      continue;
    }  // never attached: the usual error at once
    return c.Fail(why);
  }
  text.EndLine();
  if (!have_job) return 1;
  if (!json) {
    text.FinalLine(last);
    text.Summary(last);
  }
  return ExitCodeOf(last.state());
}

}  // namespace moe::cli
