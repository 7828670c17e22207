// Step time with metrics reporting on against off, at `tiny`, in one run. Reporting is the whole
// per-step path on this machine's cores: the rank serialises its metrics (moe-train --report-fd),
// the worker agent parses them into the API's StepMetrics, and the controller aggregates them (job
// metrics, stragglers, Prometheus series). Steps alternate: the report of step k runs before step
// k+1 starts, so steps that follow a reported step are compared with steps that follow an
// unreported one.
//
//   moe-bench-metrics-overhead [--steps 60]
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/args.h"
#include "common/log.h"
#include "controller/clock.h"
#include "controller/metrics_aggregator.h"
#include "kernels/runtime.h"
#include "worker/agent/step_report.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/metrics.h"
#include "worker/engine/train/trainer.h"

int main(int argc, char** argv) {
  int64_t steps = 60;
  moe::ArgParser args("moe-bench-metrics-overhead",
                      "Step time with metrics reporting on against off, at tiny.");
  args.AddInt("steps", &steps, "steps (half reported), default 60");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  moe::SetLogLevel(moe::LogLevel::kWarning);
  moe::kernels::SetNumThreads(0);
  moe::JobSpec spec;
  spec.name = "bench";
  spec.model = *moe::ModelPreset("tiny");
  spec.data.source = "synthetic";
  spec.data.seq_length = 256;
  spec.data.micro_batch_size = 8;
  spec.data.global_batch_size = 16;
  spec.training.steps = steps;
  moe::controller::RealClock clock;
  moe::controller::MetricsAggregator agg(std::make_shared<prometheus::Registry>(), clock, {}, 600,
                                         "bench");
  agg.StartAttempt("bench", 1, {{"rack0", "w0"}}, 1);
  std::vector<double> after_report, after_silence, report_cost;
  bool reported_last = false;
  moe::parallel::LocalParallel local;
  moe::train::TrainerOptions o;
  o.peak_flops = 1e11;
  o.log_steps = false;
  o.on_step = [&](const moe::train::StepMetrics& m) {
    if (m.step > 2) (reported_last ? after_report : after_silence).push_back(m.step_seconds);
    reported_last = m.step % 2 == 0;
    if (!reported_last) return;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string line = moe::train::MetricsJson(m);  // the rank
    moe::v1::StepMetrics sm;
    if (!moe::worker::StepMetricsFromJson(line, &sm).ok()) std::abort();  // the agent
    std::vector<moe::controller::StragglerChange> changes;
    (void)agg.OnStep("bench", 1, 0, sm, &changes);  // the controller
    report_cost.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto r = moe::train::Train(spec, local.ctx, o);
  if (!r.ok()) {
    std::fprintf(stderr, "training failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double on = median(after_report), off = median(after_silence), cost = median(report_cost);
  std::printf("tiny, 16 x 256 tokens per step, %lld steps (every other one reported)\n",
              static_cast<long long>(steps));
  std::printf("  median step after a reported step     %.2f ms\n", on * 1e3);
  std::printf("  median step after an unreported step  %.2f ms\n", off * 1e3);
  std::printf("  the reporting itself (serialise, parse, aggregate)  %.1f us per step\n",
              cost * 1e6);
  std::printf("RESULT metrics_reporting_step_time_ratio %.4f (goal < 1.01)\n", on / off);
  std::printf("RESULT metrics_reporting_cost_over_step %.5f\n", cost / off);
  return 0;
}
