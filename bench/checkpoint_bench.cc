// Asynchronous checkpoints against synchronous ones on the same state, in one run: the `small`
// preset trained on one CPU rank (W = 1, synthetic data), saving every --gap steps, once with
// checkpoint.async false and once true. The stall per save is what the trainer reports in its step
// metrics (checkpoint_stall_seconds: for a synchronous save the whole write; for an asynchronous
// one the copy to host memory, the per-step polls, any wait for the save before and the commit),
// each step's stall charged to the save in flight or last started. Then the checkpointer alone on
// the same state: the copy, the background write it hides, and a synchronous Save.
//
//   moe-bench-checkpoint [--preset small] [--seq 128] [--micro-batch 1] [--saves 3] [--gap 3]
//                        [--dir /tmp/moe-bench-checkpoint-PID] [--threads T]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#include "common/args.h"
#include "common/file_util.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/async_checkpoint.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/optimizer.h"
#include "worker/engine/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct ModeRun {
  std::vector<double> per_save;  // the stall charged to each save
  double mean_step = 0;          // seconds per step, the stalls left out
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
  moe::LocalParallel local;
  moe::TrainerOptions o;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = gap;
  o.peak_flops = 1e11;  // no probe: MFU is not measured here
  o.log_steps = false;
  std::map<int64_t, double> stall;
  std::vector<double> steps;
  o.on_step = [&](const moe::StepMetrics& s) {
    stall[s.step] = s.checkpoint_stall_seconds;
    if (s.step > 1) steps.push_back(s.step_seconds);
  };
  auto r = moe::Train(spec, local.ctx, o);
  (void)moe::RemoveAll(dir);
  if (!r.ok()) {
    std::fprintf(stderr, "training (async %d) failed: %s\n", async, r.status().ToString().c_str());
    return false;
  }
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
  std::printf(" s (mean %.4f s); mean step %.3f s\n", Mean(m.per_save), m.mean_step);
}

// The checkpointer alone on a fresh model of the same preset: the copy (Start), the background
// write it hides (Poll, waiting), and a synchronous Save.
bool MeasureCheckpointer(const moe::JobSpec& spec, const std::string& dir) {
  moe::LocalParallel local;
  moe::Model model(spec.model, local.ctx, 1, moe::DType::kF32, moe::Device::Cpu());
  moe::Optimizer opt(moe::OptimizerConfig(), model.params(), local.ctx, /*distributed=*/false,
                     model.config().moe.num_experts);
  moe::CheckpointManager ckpt(dir, local.ctx, "bench", 1);
  moe::AsyncCheckpointer async(&ckpt, local.ctx);
  moe::Node state = moe::Node::Map();
  moe::Status storage;
  double copy = 0;
  for (int64_t step = 1; step <= 2; ++step) {  // the second copy reuses the buffers
    const auto t0 = Clock::now();
    if (!async.Start(step, model, opt, state, &storage).ok() || !storage.ok()) return false;
    copy = Since(t0);
    auto o = async.Poll(/*wait=*/true, opt, &storage);
    if (!o.ok() || *o != moe::AsyncCheckpointer::Outcome::kCommitted) return false;
  }
  const auto t0 = Clock::now();
  if (!ckpt.Save(3, model, opt, state).ok()) return false;
  const double sync = Since(t0);
  (void)moe::RemoveAll(dir);
  std::printf(
      "  checkpointer alone, %.1f MiB this rank: copy to host %.4f s, background write "
      "%.3f s, synchronous Save %.3f s\n",
      static_cast<double>(async.last_bytes()) / (1 << 20), copy, async.last_write_seconds(), sync);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small", dir;
  int64_t seq = 128, micro = 1, saves = 3, gap = 3, threads = 0;
  moe::ArgParser args("moe-bench-checkpoint",
                      "Training stall per checkpoint save, asynchronous against synchronous, on "
                      "the same state in one run.");
  args.AddString("preset", &preset, "model preset (default small)");
  args.AddInt("seq", &seq, "sequence length (default 128)");
  args.AddInt("micro-batch", &micro, "sequences per step (default 1)");
  args.AddInt("saves", &saves, "counted saves per mode (default 3)");
  args.AddInt("gap", &gap, "steps between saves (default 3)");
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
  if (!MeasureCheckpointer(spec, dir + "/alone")) {
    std::fprintf(stderr, "the checkpointer alone failed\n");
    return 1;
  }
  (void)moe::RemoveAll(dir);
  std::printf("RESULT async_checkpoint_stall_ratio %.4f (goal <= 0.10)\n",
              Mean(async.per_save) / Mean(sync.per_save));
  return 0;
}
