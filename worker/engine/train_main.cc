// moe-train: the training engine without the controller, for development, benchmarks and debugging.
//
//   moe-train --config job.yaml [--steps N] [--checkpoint-dir D] [--checkpoint-interval K] [--resume]
//             [--metrics-out FILE] [--threads T] [--device cpu|cuda|cuda:N] [--precision fp32|bf16]
//             [--nproc N]                                       N local ranks (W = N)
//             [--rank R --world-size W --rendezvous file://DIR] one rank of a W-rank job
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <numeric>
#include <cstdio>
#include <cstdlib>

#include "common/args.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "kernels/runtime.h"
#include "worker/engine/comm/process_group.h"
#include "worker/engine/comm/store.h"
#include "worker/engine/launcher.h"
#include "worker/engine/metrics.h"
#include "worker/engine/trainer.h"

namespace {

volatile sig_atomic_t g_stop_requested = 0;
void OnStopSignal(int) { g_stop_requested = 1; }

// Exit codes: 0 done; 1 a failure a retry may fix; 2 bad flags or job file; 3 stopped on request
// (SIGTERM/SIGINT); 4 the job cannot run as specified here (a checkpoint of another layout, a dataset
// of another vocabulary): retrying cannot help.
int Fail(const moe::Status& st) {
  std::fprintf(stderr, "moe-train: %s\n", st.ToString().c_str());
  if (st.code() == moe::StatusCode::kInvalidArgument) return 2;
  if (st.code() == moe::StatusCode::kFailedPrecondition) return 4;
  return 1;
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "moe-train";
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that dies closes its sockets; writing to them must be an error Gloo reports (EPIPE), not a
  // signal that kills this rank before it can say what happened.
  ::signal(SIGPIPE, SIG_IGN);
  std::string config, checkpoint_dir, metrics_out, log_level = "info", rendezvous, hostname = "127.0.0.1", device, precision;
  int64_t steps = 0, checkpoint_interval = -1, threads = 0, nproc = 0, rank = -1, world_size = 0, expert_parallel = 0;
  int64_t report_fd = -1;
  double inject_delay = 0;
  bool resume = false;
  moe::ArgParser args("moe-train", "Trains a DeepSeek-V3-style MoE model from a job file on this machine's CPUs or GPUs.");
  args.AddString("config", &config, "job file (YAML, the TrainingJob of docs/job-spec.md)");
  args.AddInt("steps", &steps, "stop after this step (default: spec.training.steps; the LR schedule keeps the job's)");
  args.AddString("checkpoint-dir", &checkpoint_dir, "checkpoint directory (default: spec.checkpoint.dir)");
  args.AddInt("checkpoint-interval", &checkpoint_interval, "save every K steps, and at the end (default: spec.checkpoint.interval_steps)");
  args.AddFlag("resume", &resume, "continue from the newest complete checkpoint in the checkpoint directory");
  args.AddString("metrics-out", &metrics_out, "write one JSON line of metrics per step to FILE (rank 0)");
  args.AddInt("threads", &threads, "CPU threads for kernels and BLAS per rank (default: cores / ranks; $MOE_THREADS)");
  args.AddInt("nproc", &nproc, "run N local ranks as child processes (W = N; default: the job's world_size)");
  args.AddInt("expert-parallel", &expert_parallel, "override spec.parallelism.expert_parallel");
  args.AddInt("rank", &rank, "this process's rank in a multi-process job (with --world-size, --rendezvous)");
  args.AddInt("world-size", &world_size, "ranks in the job (must match spec.parallelism.world_size)");
  args.AddString("rendezvous", &rendezvous, "where the ranks meet: file:///fresh/shared/dir");
  args.AddString("hostname", &hostname, "the address other ranks reach this one at (default 127.0.0.1)");
  args.AddInt("report-fd", &report_fd, "write every rank's step metrics as JSON lines to this file descriptor");
  args.AddDouble("inject-step-delay", &inject_delay, "testing: this rank sleeps this many seconds every step");
  args.AddString("device", &device, "cpu, cuda (GPU rank % GPUs) or cuda:N (default: spec.resources.device)");
  args.AddString("precision", &precision, "fp32 or bf16 (bf16 activations, fp32 master weights; default: bf16 on cuda, fp32 on cpu)");
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
  if (nproc < 0 || nproc > 1024) return Fail(moe::InvalidArgumentError("--nproc: must be in [1, 1024]"));
  if (!device.empty()) {
    if (auto form = moe::CudaIndexFor(device, 0, 1); !form.ok()) return Fail(form.status());
  }
  if (!precision.empty() && precision != "fp32" && precision != "bf16") {
    return Fail(moe::InvalidArgumentError("--precision: '" + precision + "' is not fp32 or bf16"));
  }
  if (threads == 0 && std::getenv("MOE_THREADS") != nullptr) threads = std::atoi(std::getenv("MOE_THREADS"));

  auto spec = moe::LoadJobSpecFile(config);
  if (!spec.ok()) return Fail(spec.status());

  if (expert_parallel > 0) spec->parallelism.expert_parallel = expert_parallel;
  // Launcher: re-run this binary once per rank. A job whose world size is above 1 runs that many local
  // ranks unless this process is one rank of it (--rank).
  const bool rank_mode = rank >= 0 || world_size > 0 || !rendezvous.empty();
  if (nproc == 0 && !rank_mode && spec->parallelism.world_size > 1) nproc = spec->parallelism.world_size;
  if (nproc > 0) {
    if (rank_mode) return Fail(moe::InvalidArgumentError("--nproc: not with --rank, --world-size or --rendezvous"));
    moe::JobSpec s = *spec;
    s.parallelism.world_size = nproc;
    // --nproc sets W; EP stays the job's when it divides W, else the largest common divisor.
    const int64_t ep = std::gcd(s.parallelism.expert_parallel, nproc);
    if (ep != s.parallelism.expert_parallel) {
      std::fprintf(stderr, "moe-train: expert_parallel %lld does not divide --nproc %lld; using %lld\n",
                   static_cast<long long>(s.parallelism.expert_parallel), static_cast<long long>(nproc), static_cast<long long>(ep));
    }
    s.parallelism.expert_parallel = ep;
    if (moe::Status st = moe::ValidateJobSpec(s); !st.ok()) return Fail(st.WithPrefix("with --nproc " + std::to_string(nproc)));
    moe::LaunchOptions lo;
    lo.nproc = static_cast<int>(nproc);
    lo.program = SelfPath();
    lo.threads_per_rank = static_cast<int>(threads);
    lo.grace_seconds = s.parallelism.timeout_seconds + 5;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--nproc" || a == "--threads") { ++i; continue; }
      if (a.rfind("--nproc=", 0) == 0 || a.rfind("--threads=", 0) == 0) continue;
      lo.args.push_back(a);
    }
    lo.args.push_back("--expert-parallel");
    lo.args.push_back(std::to_string(ep));
    return moe::LaunchLocalRanks(lo);
  }

  moe::kernels::SetNumThreads(static_cast<int>(threads));
  std::unique_ptr<moe::KvStore> store;
  int r = 0, w = 1;
  if (rank_mode) {
    if (rank < 0 || world_size < 1 || rendezvous.empty()) {
      return Fail(moe::InvalidArgumentError("--rank, --world-size and --rendezvous go together"));
    }
    if (rank >= world_size) return Fail(moe::InvalidArgumentError("--rank: " + std::to_string(rank) + " is not below --world-size " + std::to_string(world_size)));
    r = static_cast<int>(rank);
    w = static_cast<int>(world_size);
    spec->parallelism.world_size = w;
    if (moe::Status st = moe::ValidateJobSpec(*spec); !st.ok()) return Fail(st.WithPrefix("with --world-size " + std::to_string(w)));
    auto opened = moe::OpenStore(rendezvous);
    if (!opened.ok()) return Fail(opened.status());
    store = std::move(*opened);
    moe::SetLogPrefix("rank" + std::to_string(r));
  }
  moe::GroupOptions go;
  const std::string where = device.empty() ? spec->resources.device : device;
  auto form = moe::CudaIndexFor(where, r, 1);
  if (!form.ok()) return Fail(form.status());
  go.backend = *form >= 0 ? "nccl" : "gloo";
#ifdef MOE_WITH_CUDA
  // NCCL binds its communicators to the current device: choose it, as the trainer will, before they
  // are made.
  if (*form >= 0) {
    auto index = moe::CudaIndexFor(where, r, moe::kernels::CudaDeviceCount());
    if (!index.ok()) return Fail(index.status());
    if (moe::Status st = moe::kernels::UseCudaDevice(*index); !st.ok()) return Fail(st);
  }
#endif
  go.timeout_seconds = spec->parallelism.timeout_seconds;
  go.hostname = hostname;
  auto groups = moe::ProcessGroups::Create(w, r, static_cast<int>(spec->parallelism.expert_parallel), store.get(), go);
  if (!groups.ok()) return Fail(groups.status());

  moe::TrainerOptions options;
  options.stop_at_step = steps;
  options.checkpoint_dir = checkpoint_dir;
  options.checkpoint_interval = checkpoint_interval;
  options.resume = resume;
  options.metrics_out = metrics_out;
  options.inject_step_delay = inject_delay;
  options.device = device;
  options.precision = precision;
  // SIGTERM or SIGINT: stop at the next step boundary (all ranks agree on which), exit code 3.
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  options.should_stop = [] { return g_stop_requested != 0; };
  FILE* report = nullptr;
  if (report_fd >= 0) {
    report = ::fdopen(static_cast<int>(report_fd), "w");
    if (report == nullptr) return Fail(moe::InvalidArgumentError("--report-fd: " + std::to_string(report_fd) + " is not open"));
    options.on_step = [report](const moe::StepMetrics& m) {
      std::fprintf(report, "%s\n", moe::MetricsJson(m).c_str());
      std::fflush(report);
    };
  }
  auto result = moe::Train(*spec, (*groups)->ctx(), options);
  if (!result.ok()) {
    MOE_LOG(ERROR) << "training failed: " << result.status();
    return Fail(result.status());
  }
  if (result->stopped_early) {
    if (r == 0) std::fprintf(stderr, "moe-train: stopped after step %lld (asked to stop)\n", static_cast<long long>(result->last_step));
    return 3;
  }
  if (r == 0 && result->last_step >= result->first_step) {
    std::fprintf(stderr,
                 "summary: steps %lld-%lld | loss %.4f -> %.4f (x%.3f) | %.0f tokens/s | %.4f TFLOP/s per device | "
                 "MFU %.1f%% (against %s) | %s, %s\n",
                 static_cast<long long>(result->first_step), static_cast<long long>(result->last_step),
                 result->first_loss, result->last_loss, result->last_loss / result->first_loss,
                 result->mean_tokens_per_second, result->mean_tflops_per_device, result->mean_mfu * 100,
                 result->peak_source.c_str(), result->device.c_str(), result->precision.c_str());
  }
  return 0;
}
