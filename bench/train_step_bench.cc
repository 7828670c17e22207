// CPU training step at the `small` preset in both gradient modes, in one run: model FLOP/s
// (Megatron's count) divided by the SGEMM peak measured in the same run through the same BLAS and
// threads, for training.deterministic false (OpenBLAS, gradients summed in fp32) and true (the CPU
// default: the reproducible GEMM, f64 gradient sums), and the deterministic step's time over the
// fast one's. Ratios, because this machine is shared and noisy; the peak is probed before and after
// the steps and the higher one is used, and the two modes alternate in rounds (--rounds) so that a
// neighbour's burst does not land on one mode only.
//
//   moe-bench-train-step [--preset small] [--seq 512] [--micro-batch 4] [--steps 3] [--rounds 2]
//                        [--threads T]
#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/args.h"
#include "common/flops.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/trainer.h"

namespace {

struct ModeTimes {
  std::vector<double> step, compute;
  double Median(std::vector<double> v) const {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

// One training run of `steps` timed steps (after a warm-up step) in the given mode.
bool RunMode(moe::JobSpec spec, bool deterministic, double peak, const std::string& source,
             ModeTimes* out) {
  spec.training.deterministic = deterministic;
  moe::parallel::LocalParallel local;
  moe::train::TrainerOptions o;
  o.peak_flops = peak;
  o.peak_source = source;
  o.log_steps = false;
  o.on_step = [&](const moe::train::StepMetrics& s) {
    if (s.step > 1) {  // the first step pays for page faults and the allocator's warm-up
      out->step.push_back(s.step_seconds);
      out->compute.push_back(s.compute_seconds);
    }
  };
  auto r = moe::train::Train(spec, local.ctx, o);
  if (!r.ok()) {
    std::fprintf(stderr, "training (deterministic %d) failed: %s\n", deterministic,
                 r.status().ToString().c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small";
  int64_t seq = 512, micro = 4, steps = 3, rounds = 2, threads = 0;
  moe::ArgParser args("moe-bench-train-step",
                      "CPU training step in both gradient modes: model FLOP/s over the measured "
                      "SGEMM peak, and the deterministic step's cost.");
  args.AddString("preset", &preset, "model preset (default small)");
  args.AddInt("seq", &seq, "sequence length (default 512)");
  args.AddInt("micro-batch", &micro, "sequences per step (default 4)");
  args.AddInt("steps", &steps, "timed steps per run after one warm-up step (default 3)");
  args.AddInt("rounds", &rounds, "runs of each mode, alternating (default 2)");
  args.AddInt("threads", &threads, "CPU threads (default: all cores)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (steps < 1 || rounds < 1) {
    std::fprintf(stderr, "--steps and --rounds: at least 1 each\n");
    return 2;
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
  const moe::train::PeakFlops before = moe::train::MeasureCpuSgemmPeak(1024, 1.0);
  ModeTimes fast, det;
  for (int64_t r = 0; r < rounds; ++r) {
    if (!RunMode(spec, false, before.flops_per_second, before.source, &fast)) return 1;
    if (!RunMode(spec, true, before.flops_per_second, before.source, &det)) return 1;
  }
  const moe::train::PeakFlops after = moe::train::MeasureCpuSgemmPeak(1024, 1.0);
  const double peak = std::max(before.flops_per_second, after.flops_per_second);
  const double flops = moe::MegatronFlopsPerStep(spec.model, micro, seq);
  std::printf("train step, preset %s, %lld x %lld tokens, %d threads, %lld x %lld steps a mode\n",
              preset.c_str(), static_cast<long long>(micro), static_cast<long long>(seq),
              moe::kernels::NumThreads(), static_cast<long long>(rounds),
              static_cast<long long>(steps));
  std::printf("  model FLOPs per step (Megatron)   %.4g\n", flops);
  std::printf("  SGEMM peak (same run)             %.1f GFLOP/s (%s; before %.1f, after %.1f)\n",
              peak / 1e9, before.source.c_str(), before.flops_per_second / 1e9,
              after.flops_per_second / 1e9);
  double medians[2];
  for (int i = 0; i < 2; ++i) {
    const ModeTimes& t = i == 0 ? fast : det;
    medians[i] = t.Median(t.step);
    const double c = t.Median(t.compute);
    std::printf(
        "  %-13s median step %.3f s (forward+backward %.3f s, optimizer and the rest %.3f s), "
        "%.1f GFLOP/s\n",
        i == 0 ? "fast" : "deterministic", medians[i], c, medians[i] - c, flops / medians[i] / 1e9);
  }
  std::printf("RESULT train_step_fast_over_sgemm_peak %.3f\n", flops / medians[0] / peak);
  std::printf("RESULT train_step_deterministic_over_sgemm_peak %.3f (goal >= 0.8)\n",
              flops / medians[1] / peak);
  std::printf("RESULT deterministic_step_cost_ratio %.3f (goal <= 1.15)\n",
              medians[1] / medians[0]);
  return 0;
}
