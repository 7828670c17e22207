// Asynchronous checkpoints against synchronous ones on the same state, in one run: the `small`
// preset trained on one CPU rank (W = 1, synthetic data), saving every --gap steps, once with
// checkpoint.async false and once true. The stall per save is what the trainer reports in its step
// metrics (checkpoint_stall_seconds: for a synchronous save the whole write; for an asynchronous
// one the copy to host memory, the per-step polls, any wait for the save before and the commit),
// each step's stall charged to the save last started. Also: the background writes' time (what the
// asynchronous saves hide) and the mean step time in each mode (the writer shares the cores).
//
//   moe-bench-checkpoint [--preset small] [--seq 64] [--micro-batch 1] [--saves 2] [--gap 5]
//                        [--dir /tmp/moe-bench-checkpoint-PID] [--threads T]
#include <unistd.h>

#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#include "common/args.h"
#include "common/file_util.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace {

struct ModeRun {
  std::vector<double> per_save;  // the stall charged to each save
  double mean_step = 0;          // seconds per step, the stalls left out
  int64_t background_saves = 0;
  double background_write_seconds = 0;  // summed
};

// Saves at gap, 2 gap, ..., saves x gap; the run stops at (saves + 1) x gap, whose final save
// (synchronous in both modes, unreported: no step follows it) is not counted. The stall of the
// boundary after step b is reported by step b + 1; boundaries k .. k + gap - 1 are charged to the
// save of step k.
bool RunMode(moe::JobSpec spec, bool async, const std::string& dir, int64_t saves, int64_t gap,
             ModeRun* out) {
  spec.checkpoint.async = async;
  spec.checkpoint.keep_last = 1;
  spec.training.steps = (saves + 1) * gap;
  moe::parallel::LocalParallel local;
  moe::train::TrainerOptions o;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = gap;
  o.peak_flops = 1e11;  // no probe: MFU is not measured here
  o.log_steps = false;
  std::map<int64_t, double> stall;
  std::vector<double> steps;
  o.on_step = [&](const moe::train::StepMetrics& s) {
    stall[s.step] = s.checkpoint_stall_seconds;
    if (s.step > 1) steps.push_back(s.step_seconds);
  };
  auto r = moe::train::Train(spec, local.ctx, o);
  (void)moe::RemoveAll(dir);
  if (!r.ok()) {
    std::fprintf(stderr, "training (async %d) failed: %s\n", async, r.status().ToString().c_str());
    return false;
  }
  out->background_saves = r->background_saves;
  out->background_write_seconds = r->background_write_seconds;
  for (int64_t k = gap; k <= saves * gap; k += gap) {
    double sum = 0;
    for (int64_t s = k + 1; s <= k + gap; ++s) sum += stall[s];
    out->per_save.push_back(sum);
  }
  out->mean_step = std::accumulate(steps.begin(), steps.end(), 0.0) /
                   static_cast<double>(std::max<size_t>(1, steps.size()));
  return true;
}

double Mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

void PrintMode(const char* name, const ModeRun& m) {
  std::printf("  %-12s stall per save", name);
  for (double s : m.per_save) std::printf(" %.4f", s);
  std::printf(" s (mean %.4f s); mean step %.3f s", Mean(m.per_save), m.mean_step);
  if (m.background_saves > 0) {
    std::printf("; background write %.3f s a save (%lld saves)",
                m.background_write_seconds / static_cast<double>(m.background_saves),
                static_cast<long long>(m.background_saves));
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small", dir;
  int64_t seq = 64, micro = 1, saves = 2, gap = 5, threads = 0;
  moe::ArgParser args("moe-bench-checkpoint",
                      "Training stall per checkpoint save, asynchronous against synchronous, on "
                      "the same state in one run.");
  args.AddString("preset", &preset, "model preset (default small)");
  args.AddInt("seq", &seq, "sequence length (default 64)");
  args.AddInt("micro-batch", &micro, "sequences per step (default 1)");
  args.AddInt("saves", &saves, "counted saves per mode (default 2)");
  args.AddInt("gap", &gap, "steps between saves (default 5)");
  args.AddString("dir", &dir, "checkpoint directory (default /tmp/moe-bench-checkpoint-PID)");
  args.AddInt("threads", &threads, "CPU threads (default: all cores)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (saves < 1 || gap < 2) {
    std::fprintf(stderr, "--saves: at least 1; --gap: at least 2\n");
    return 2;
  }
  if (dir.empty()) dir = "/tmp/moe-bench-checkpoint-" + std::to_string(::getpid());
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
  ModeRun sync, async;
  if (!RunMode(spec, false, dir + "/sync", saves, gap, &sync)) return 1;
  if (!RunMode(spec, true, dir + "/async", saves, gap, &async)) return 1;
  std::printf(
      "checkpoint stall, preset %s, W = 1 on cpu, %d threads, %lld saves a mode %lld "
      "steps apart (%lld x %lld tokens a step), in %s\n",
      preset.c_str(), moe::kernels::NumThreads(), static_cast<long long>(saves),
      static_cast<long long>(gap), static_cast<long long>(micro), static_cast<long long>(seq),
      dir.c_str());
  PrintMode("synchronous", sync);
  PrintMode("asynchronous", async);
  (void)moe::RemoveAll(dir);
  std::printf("RESULT async_checkpoint_stall_ratio %.4f (goal <= 0.10)\n",
              Mean(async.per_save) / Mean(sync.per_save));
  return 0;
}
