// CPU training step at the `small` preset: model FLOP/s (Megatron's count) divided by the SGEMM
// peak measured in the same run, through the same BLAS and threads. A ratio, because this machine
// is shared and noisy; the peak is probed before and after the steps and the higher one is used.
//
//   moe-bench-train-step [--preset small] [--seq 512] [--micro-batch 4] [--steps 5] [--threads T]
#include <algorithm>
#include <cstdio>

#include "common/args.h"
#include "common/flops.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/trainer.h"

int main(int argc, char** argv) {
  std::string preset = "small";
  int64_t seq = 512, micro = 4, steps = 5, threads = 0;
  moe::ArgParser args("moe-bench-train-step",
                      "CPU training step: model FLOP/s over the measured SGEMM peak.");
  args.AddString("preset", &preset, "model preset (default small)");
  args.AddInt("seq", &seq, "sequence length (default 512)");
  args.AddInt("micro-batch", &micro, "sequences per step (default 4)");
  args.AddInt("steps", &steps, "timed steps after one warm-up step (default 5)");
  args.AddInt("threads", &threads, "CPU threads (default: all cores)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  moe::kernels::SetNumThreads(static_cast<int>(threads));
  moe::SetLogLevel(moe::LogLevel::kWarning);
  moe::JobSpec spec;
  spec.name = "bench";
  auto m = moe::ModelPreset(preset);
  if (!m.ok()) {
    std::fprintf(stderr, "--preset: %s\n", m.status().message().c_str());
    return 2;
  }
  spec.model = *m;
  spec.data.source = "synthetic";
  spec.data.seq_length = seq;
  spec.data.micro_batch_size = micro;
  spec.data.global_batch_size = micro;
  spec.training.steps = steps + 1;
  const moe::PeakFlops before = moe::MeasureCpuSgemmPeak(1024, 1.0);
  std::vector<double> seconds;
  std::vector<double> compute;
  moe::LocalParallel local;
  moe::TrainerOptions o;
  o.peak_flops = before.flops_per_second;
  o.peak_source = before.source;
  o.log_steps = false;
  o.on_step = [&](const moe::StepMetrics& s) {
    if (s.step > 1) {  // the first step pays for page faults and the allocator's warm-up
      seconds.push_back(s.step_seconds);
      compute.push_back(s.compute_seconds);
    }
  };
  auto r = moe::Train(spec, local.ctx, o);
  if (!r.ok()) {
    std::fprintf(stderr, "training failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const moe::PeakFlops after = moe::MeasureCpuSgemmPeak(1024, 1.0);
  const double peak = std::max(before.flops_per_second, after.flops_per_second);
  std::sort(seconds.begin(), seconds.end());
  std::sort(compute.begin(), compute.end());
  const double median = seconds[seconds.size() / 2];
  const double flops = moe::MegatronFlopsPerStep(spec.model, micro, seq);
  const double achieved = flops / median;
  std::printf("train step, preset %s, %lld x %lld tokens, %d threads\n", preset.c_str(),
              static_cast<long long>(micro), static_cast<long long>(seq),
              moe::kernels::NumThreads());
  std::printf("  model FLOPs per step (Megatron)   %.4g\n", flops);
  std::printf(
      "  median step                       %.3f s (forward+backward %.3f s, optimizer and the rest "
      "%.3f s)\n",
      median, compute[compute.size() / 2], median - compute[compute.size() / 2]);
  std::printf("  model FLOP/s                      %.1f GFLOP/s\n", achieved / 1e9);
  std::printf("  SGEMM peak (same run)             %.1f GFLOP/s (%s; before %.1f, after %.1f)\n",
              peak / 1e9, before.source.c_str(), before.flops_per_second / 1e9,
              after.flops_per_second / 1e9);
  std::printf("RESULT train_step_model_flops_over_sgemm_peak %.3f (goal >= 0.5)\n",
              achieved / peak);
  return 0;
}
