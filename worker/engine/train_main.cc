// moe-train: the training engine without the controller, for development, benchmarks and debugging.
//
//   moe-train --config job.yaml [--steps N] [--checkpoint-dir D] [--checkpoint-interval K] [--resume]
//             [--metrics-out FILE] [--threads T]
#include <cstdio>
#include <cstdlib>

#include "common/args.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/trainer.h"

namespace {

int Fail(const moe::Status& st) {
  std::fprintf(stderr, "moe-train: %s\n", st.ToString().c_str());
  return st.code() == moe::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, checkpoint_dir, metrics_out, log_level = "info";
  int64_t steps = 0, checkpoint_interval = -1, threads = 0;
  bool resume = false;
  moe::ArgParser args("moe-train", "Trains a DeepSeek-V3-style MoE model from a job file on this machine's CPU.");
  args.AddString("config", &config, "job file (YAML, the TrainingJob of docs/job-spec.md)");
  args.AddInt("steps", &steps, "stop after this step (default: spec.training.steps; the LR schedule keeps the job's)");
  args.AddString("checkpoint-dir", &checkpoint_dir, "checkpoint directory (default: spec.checkpoint.dir)");
  args.AddInt("checkpoint-interval", &checkpoint_interval, "save every K steps, and at the end (default: spec.checkpoint.interval_steps)");
  args.AddFlag("resume", &resume, "continue from the newest complete checkpoint in the checkpoint directory");
  args.AddString("metrics-out", &metrics_out, "write one JSON line of metrics per step to FILE");
  args.AddInt("threads", &threads, "CPU threads for kernels and BLAS (default: all cores; $MOE_THREADS)");
  args.AddString("log-level", &log_level, "debug | info | warning | error");
  args.Require("config");
  if (moe::Status st = args.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "moe-train: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help_requested()) {
    std::printf("%s", args.Usage().c_str());
    return 0;
  }
  moe::LogLevel level;
  if (!moe::ParseLogLevel(log_level, &level)) return Fail(moe::InvalidArgumentError("--log-level: unknown level '" + log_level + "'"));
  moe::SetLogLevel(level);
  if (steps < 0) return Fail(moe::InvalidArgumentError("--steps: must be >= 1"));
  if (checkpoint_interval < -1) return Fail(moe::InvalidArgumentError("--checkpoint-interval: must be >= 0"));
  if (threads == 0 && std::getenv("MOE_THREADS") != nullptr) threads = std::atoi(std::getenv("MOE_THREADS"));
  moe::kernels::SetNumThreads(static_cast<int>(threads));

  auto spec = moe::LoadJobSpecFile(config);
  if (!spec.ok()) return Fail(spec.status());

  moe::LocalParallel local;
  moe::TrainerOptions options;
  options.stop_at_step = steps;
  options.checkpoint_dir = checkpoint_dir;
  options.checkpoint_interval = checkpoint_interval;
  options.resume = resume;
  options.metrics_out = metrics_out;
  auto result = moe::Train(*spec, local.ctx, options);
  if (!result.ok()) return Fail(result.status());
  if (result->last_step >= result->first_step) {
    std::fprintf(stderr,
                 "summary: steps %lld-%lld | loss %.4f -> %.4f (x%.3f) | %.0f tokens/s | %.4f TFLOP/s per device | "
                 "MFU %.1f%% (against %s)\n",
                 static_cast<long long>(result->first_step), static_cast<long long>(result->last_step),
                 result->first_loss, result->last_loss, result->last_loss / result->first_loss,
                 result->mean_tokens_per_second, result->mean_tflops_per_device, result->mean_mfu * 100,
                 result->peak_source.c_str());
  }
  return 0;
}
