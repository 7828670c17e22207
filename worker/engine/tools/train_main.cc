// moe-train: the training engine without the controller, for development, benchmarks and debugging.
//
//   moe-train --config job.yaml [--steps N] [--checkpoint-dir D] [--checkpoint-interval K]
//   [--resume]
//             [--metrics-out FILE] [--threads T] [--device cpu|cuda|cuda:N] [--precision
//             fp32|bf16|fp8]
//             [--nproc N]                                       N local ranks (W = N)
//             [--rank R [--world-size W] --rendezvous file://DIR] one rank of the job (W: its
//             spec's)
//
// Exit codes and the final record on --report-fd: common/rank_end.h.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <numeric>
#include <string>
#include <thread>

#include "common/args.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/plan_profiles.h"
#include "common/rank_end.h"
#include "kernels/gpu_libraries.h"
#include "kernels/runtime.h"
#include "worker/engine/device.h"
#include "worker/engine/parallel/nccl_comm.h"
#include "worker/engine/parallel/process_group.h"
#include "worker/engine/parallel/store.h"
#include "worker/engine/train/describe.h"
#include "worker/engine/train/launcher.h"
#include "worker/engine/train/metrics.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/trainer.h"

namespace {

// SIGTERM or SIGINT. Until the first step boundary (initialisation: communicators, the model, a
// checkpoint's load, which can take minutes for a big model) there is nothing to keep, so the rank
// exits at once with the "stopped" code (its starter reads exit code 3 as stopped on request); from
// then on it stops at the next step boundary, which every rank agrees on, checkpointing there.
// Lock-free atomics: the handler may run on any thread.
//
// A step that does not end in time (max(1.5 s, 2 x the longest of the last four steps) after the
// request: a hung collective, a step that never finishes; steps on a loaded host vary by half and
// more, so the margin is a recent long step's, doubled; the first step, with its warm-up, counts
// only until others are timed, and an evaluation's long step only for the four after it) stops the
// rank at once as well; the job resumes from its newest checkpoint. Checkpoints (periodic, final,
// the stop's own) and the agreed stop are never cut (Trainer's on_protected).
std::atomic<int> g_stop_requested{0};
std::atomic<int> g_training{0};  // set at the first step boundary
std::atomic<int> g_protected{
    0};  // > 0: writing a checkpoint, or stopping at an agreed boundary: no watchdog
std::atomic<int64_t> g_stop_ms{0}, g_boundary_ms{0};  // monotonic milliseconds
// Step times in milliseconds: the first, then the last four after it (a ring).
std::atomic<int64_t> g_first_step_ms{0};
std::array<std::atomic<int64_t>, 4> g_recent_step_ms{};
std::atomic<int> g_steps_timed{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);

int64_t MonotonicMs() {  // async-signal-safe
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void OnStopSignal(int) {
  if (g_training.load() == 0) ::_exit(moe::kExitStopped);
  // Repeated signals are common and change nothing (Slurm's scancel signals the rank and its
  // worker, which signals it again; Ctrl-C reaches the --nproc launcher's ranks and the launcher
  // forwards it): the deadline runs from the first.
  if (g_stop_requested.load() != 0) return;
  g_stop_ms.store(MonotonicMs());
  g_stop_requested.store(1);
}

// Called at every step boundary: the step's duration, and whether to stop here.
bool AtStepBoundary() {
  const int64_t now = MonotonicMs(), last = g_boundary_ms.exchange(now);
  if (g_training.exchange(1) != 0) {
    const int n = g_steps_timed.fetch_add(1);
    if (n == 0) {
      g_first_step_ms.store(now - last);
    } else {
      g_recent_step_ms[static_cast<size_t>((n - 1) % 4)].store(now - last);
    }
  }
  return g_stop_requested.load() != 0;
}

// The step time the watchdog allows for: the longest of the last four, else the first step's.
int64_t StepAllowanceMs() {
  int64_t longest = 0;
  for (const auto& ms : g_recent_step_ms) longest = std::max(longest, ms.load());
  return longest > 0 ? longest : g_first_step_ms.load();
}

// The watchdog of a stop that waits for a step boundary (see above).
void StopWatchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_stop_requested.load() == 0 || g_protected.load() > 0) continue;
    const int64_t deadline = std::max<int64_t>(1500, StepAllowanceMs() * 2);
    const int64_t waited = MonotonicMs() - g_stop_ms.load();
    if (waited < deadline) continue;
    const std::string msg = "moe-train: stopping now: the step did not end within " +
                            std::to_string(waited) +
                            " ms of the stop request; the job resumes from its newest checkpoint\n";
    if (::write(2, msg.data(), msg.size()) < 0) {
    }
    ::_exit(moe::kExitStopped);
  }
}

struct Flags {
  std::string config, checkpoint_dir, metrics_out, log_level = "info", rendezvous,
                                                   hostname = "127.0.0.1", device, precision;
  int64_t steps = 0, checkpoint_interval = -1, threads = 0, nproc = 0, rank = -1, world_size = 0,
          expert_parallel = 0, pipeline_parallel = 0;
  int64_t report_fd = -1;
  double inject_delay = 0;
  double device_memory_gb = 0;
  std::string cluster;  // --describe: a planner cluster profile whose device memory is the capacity
  bool resume = false;
  bool describe = false, version = false;
  std::string preset, init_from;
  std::string peak_cache, measure_peak;  // the CPU SGEMM peak: read from / written to a file
  std::vector<std::string> data_roots,
      checkpoint_roots;                     // a worker's confinement (its agent passes them)
  std::string job_id, job_name, job_owner;  // the job this rank runs for: its checkpoint claim
  int64_t epoch = 0, attempt = 0;
  bool rank_mode() const { return rank >= 0 || world_size > 0 || !rendezvous.empty(); }
};

// Where the final record goes (--report-fd), once the stream is open.
FILE* g_report = nullptr;

// Ends this process the way `end` says: the final record on the report stream, the exit code. One
// record whichever comes first: the main thread's end or the NCCL watchdog's (its own thread).
int Finish(const moe::RankEnd& end) {
  static std::atomic<bool> finished{false};
  if (finished.exchange(true)) return end.exit_code();
  if (!end.ok() && end.failure_class != moe::FailureClass::kStopped) {
    std::fprintf(stderr, "moe-train: %s: %s\n", std::string(moe::StatusCodeName(end.code)).c_str(),
                 end.message.c_str());
  }
  if (g_report != nullptr) {
    std::fprintf(g_report, "%s\n", moe::RankEndJson(end).c_str());
    std::fflush(g_report);
  }
  return end.exit_code();
}
int Fail(const moe::Status& st) { return Finish(moe::RankEndFor(st)); }

// A collective that failed where no caller waits (NCCL's watchdog): the final record, then the exit
// its class says (a hung or lost peer: restart from the newest checkpoint).
[[noreturn]] void OnUnwaitedCollectiveFailure(const moe::Status& st) { ::_exit(Fail(st)); }

// What a worker agent passes its ranks: where the job's paths are confined, and who the rank runs
// for (its lead rank claims the checkpoint directory with it: checkpoint/ownership.h).
void AddWorkerFlags(moe::ArgParser& args, Flags* f) {
  args.AddStrings("data-root", &f->data_roots,
                  "open spec.data.path beneath one of these (repeatable; the worker's roots); a "
                  "relative path: below the first that holds <path>.idx");
  args.AddStrings(
      "checkpoint-root", &f->checkpoint_roots,
      "open the checkpoint directory beneath one of these (repeatable; the worker's roots)");
  args.AddString("job-id", &f->job_id,
                 "the job this rank runs for: the checkpoint directory is claimed for it");
  args.AddString("job-name", &f->job_name, "with --job-id: the job's metadata.name");
  args.AddString("job-owner", &f->job_owner, "with --job-id: who submitted it");
  args.AddInt("epoch", &f->epoch, "with --job-id: the controller's fencing epoch");
  args.AddInt("attempt", &f->attempt, "with --job-id: the attempt number");
}

moe::ArgParser MakeParser(Flags* f) {
  moe::ArgParser args(
      "moe-train",
      "Trains a DeepSeek-V3-style MoE model from a job file on this machine's CPUs or GPUs.");
  args.AddString("config", &f->config, "job file (YAML, the TrainingJob of docs/job-spec.md)");
  args.AddFlag("version", &f->version,
               "print the version and, one line each, the GPU libraries this build uses: the "
               "cuDNN frontend and CUTLASS (headers), cuDNN and cuBLAS (runtime), NCCL");
  args.AddInt(
      "steps", &f->steps,
      "stop after this step (default: spec.training.steps; the LR schedule keeps the job's)");
  args.AddString("checkpoint-dir", &f->checkpoint_dir,
                 "checkpoint directory (default: spec.checkpoint.dir)");
  args.AddInt("checkpoint-interval", &f->checkpoint_interval,
              "save every K steps, and at the end (default: spec.checkpoint.interval_steps)");
  args.AddFlag("resume", &f->resume,
               "continue from the newest complete checkpoint in the checkpoint directory");
  args.AddString("metrics-out", &f->metrics_out,
                 "write one JSON line of metrics per step to FILE (rank 0)");
  args.AddString("peak-cache", &f->peak_cache,
                 "cpu: the SGEMM peak MFU is measured against, read from FILE (written there when "
                 "missing), so "
                 "the ranks of one worker measure it once (moe-worker passes it)");
  args.AddString("measure-peak", &f->measure_peak,
                 "cpu: measure the SGEMM peak with --threads, write it to FILE, exit");
  args.AddInt("threads", &f->threads,
              "CPU threads for kernels and BLAS per rank (default: cores / ranks; $MOE_THREADS)");
  args.AddInt("nproc", &f->nproc,
              "run N local ranks as child processes (W = N; default: the job's world_size)");
  args.AddInt("expert-parallel", &f->expert_parallel, "override spec.parallelism.expert_parallel");
  args.AddInt("pipeline-parallel", &f->pipeline_parallel,
              "override spec.parallelism.pipeline_parallel");
  args.AddInt("rank", &f->rank, "this process's rank in a multi-process job (with --rendezvous)");
  args.AddInt("world-size", &f->world_size,
              "ranks in the job (default: spec.parallelism.world_size)");
  args.AddString("rendezvous", &f->rendezvous, "where the ranks meet: file:///fresh/shared/dir");
  args.AddString("hostname", &f->hostname,
                 "the address other ranks reach this one at (default 127.0.0.1)");
  args.AddInt("report-fd", &f->report_fd,
              "write step metrics as JSON lines, then a final record, to this file descriptor");
  args.AddDouble("inject-step-delay", &f->inject_delay,
                 "testing: this rank sleeps this many seconds every step");
  args.AddString("device", &f->device,
                 "cpu, cuda (GPU rank % GPUs) or cuda:N (default: spec.resources.device)");
  args.AddString("precision", &f->precision,
                 "fp32, bf16 (bf16 activations, fp32 master weights) or fp8 (bf16 with the linear "
                 "layers' GEMM inputs in e4m3, "
                 "DeepSeek-V3's tiles; emulated numerics); default: the spec's "
                 "resources.precision, else bf16 on cuda, fp32 on cpu");
  args.AddString("log-level", &f->log_level, "debug | info | warning | error");
  args.AddFlag("describe", &f->describe,
               "print the model (parameters total and activated, FLOPs per token) and each "
               "pipeline rank's memory at the "
               "job's layout (with --nproc, --pipeline-parallel, --expert-parallel, --precision), "
               "and exit; no data needed");
  args.AddDouble("device-memory-gb", &f->device_memory_gb,
                 "with --describe: the memory of one device in GB (default: --cluster's, for cuda "
                 "jobs; the host's for cpu)");
  args.AddString("cluster", &f->cluster,
                 "with --describe: a cluster profile (moectl plan's: gb200-nvl72 by default, "
                 "gb300-nvl72, h100, ... or a "
                 "YAML path) whose device memory a cuda job is judged against");
  args.AddString("init-from", &f->init_from,
                 "start from a Hugging Face DeepseekV3 directory (config.json + safetensors) "
                 "unless a checkpoint is resumed");
  args.AddString("preset", &f->preset,
                 "with --describe and no --config: describe this model preset at seq 4096");
  AddWorkerFlags(args, f);
  return args;
}

moe::Status CheckFlags(Flags* f) {
  moe::LogLevel level;
  if (!moe::ParseLogLevel(f->log_level, &level))
    return moe::InvalidArgumentError("--log-level: unknown level '" + f->log_level + "'");
  moe::SetLogLevel(level);
  if (f->report_fd >= 0) {
    g_report = ::fdopen(static_cast<int>(f->report_fd), "w");
    if (g_report == nullptr)
      return moe::InvalidArgumentError("--report-fd: " + std::to_string(f->report_fd) +
                                       " is not open");
  }
  if (f->steps < 0) return moe::InvalidArgumentError("--steps: must be >= 1");
  if (f->checkpoint_interval < -1)
    return moe::InvalidArgumentError("--checkpoint-interval: must be >= 0");
  if (f->nproc < 0 || f->nproc > 1024)
    return moe::InvalidArgumentError("--nproc: must be in [1, 1024]");
  if (!f->device.empty()) MOE_RETURN_IF_ERROR(moe::CudaIndexFor(f->device, 0, 1).status());
  MOE_RETURN_IF_ERROR(moe::CheckPrecision(f->precision));
  if (f->threads == 0 && std::getenv("MOE_THREADS") != nullptr)
    f->threads = std::atoi(std::getenv("MOE_THREADS"));
  return moe::OkStatus();
}

// The job file, or for --describe --preset a job of that model at DeepSeek-V3's sequence length.
moe::StatusOr<moe::JobSpec> LoadSpec(const Flags& f) {
  if (!f.preset.empty()) {
    if (!f.config.empty())
      return moe::InvalidArgumentError(
          "--preset: not with --config (the job file names its model)");
    if (!f.describe)
      return moe::InvalidArgumentError(
          "--preset: only with --describe (training needs a job file: --config)");
    moe::JobSpec spec;
    spec.name = f.preset;
    auto model = moe::ModelPreset(f.preset);
    if (!model.ok()) return model.status().WithPrefix("--preset");
    spec.model = *model;
    spec.data.source = "synthetic";
    spec.data.seq_length = 4096;
    return spec;
  }
  if (f.config.empty())
    return moe::InvalidArgumentError("--config: missing (a job file; or --describe --preset NAME)");
  return moe::LoadJobSpecFile(f.config);
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "moe-train";
}

// --nproc N: re-run this binary once per rank. PP stays the job's (it must divide N); EP stays the
// job's when it divides N / PP, else the largest common divisor.
int RunLauncher(const Flags& f, moe::JobSpec spec, int argc, char** argv) {
  spec.parallelism.world_size = f.nproc;
  const int64_t pp = spec.parallelism.pipeline_parallel;
  if (f.nproc % pp != 0) {
    return Fail(moe::InvalidArgumentError(
        "--nproc: " + std::to_string(f.nproc) +
        " is not divisible by pipeline_parallel = " + std::to_string(pp)));
  }
  const int64_t ep = std::gcd(spec.parallelism.expert_parallel, f.nproc / pp);
  if (ep != spec.parallelism.expert_parallel) {
    std::fprintf(stderr,
                 "moe-train: expert_parallel %lld does not divide --nproc %lld; using %lld\n",
                 static_cast<long long>(spec.parallelism.expert_parallel),
                 static_cast<long long>(f.nproc), static_cast<long long>(ep));
  }
  spec.parallelism.expert_parallel = ep;
  if (moe::Status st = moe::ValidateJobSpec(spec); !st.ok())
    return Fail(st.WithPrefix("with --nproc " + std::to_string(f.nproc)));
  moe::train::LaunchOptions lo;
  lo.nproc = static_cast<int>(f.nproc);
  lo.program = SelfPath();
  lo.threads_per_rank = static_cast<int>(f.threads);
  lo.grace_seconds = spec.parallelism.timeout_seconds + 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc" || a == "--threads" || a == "--report-fd") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0 || a.rfind("--threads=", 0) == 0 ||
        a.rfind("--report-fd=", 0) == 0)
      continue;
    lo.args.push_back(a);
  }
  lo.args.push_back("--expert-parallel");
  lo.args.push_back(std::to_string(ep));
  const int code = moe::train::LaunchLocalRanks(lo);
  if (g_report != nullptr) {  // the launcher's own final record, for whoever started it
    std::fprintf(g_report, "%s\n",
                 moe::RankEndJson(moe::RankEndForExitCode(code, "the local ranks failed")).c_str());
    std::fflush(g_report);
  }
  return code;
}

// The rank's communicators, after its device is bound (NCCL binds to the current device).
moe::StatusOr<std::unique_ptr<moe::parallel::ProcessGroups>> MakeGroups(
    const Flags& f, moe::JobSpec* spec, int* rank, const moe::DevicePlacement& place,
    std::unique_ptr<moe::parallel::KvStore>* store) {
  int w = 1;
  *rank = 0;
  if (f.rank_mode()) {
    // The world size is the spec's (a worker agent's assignment carries the attempt's);
    // --world-size, when given, must agree with it or replaces it (hand-launched ranks).
    const int64_t world = f.world_size > 0 ? f.world_size : spec->parallelism.world_size;
    if (f.rank < 0 || f.rendezvous.empty())
      return moe::InvalidArgumentError("--rank and --rendezvous go together");
    if (f.rank >= world) {
      return moe::InvalidArgumentError(
          "--rank: " + std::to_string(f.rank) + " is not below the world size " +
          std::to_string(world) +
          (f.world_size > 0 ? " (--world-size)" : " (spec.parallelism.world_size)"));
    }
    *rank = static_cast<int>(f.rank);
    w = static_cast<int>(world);
    spec->parallelism.world_size = w;
    MOE_RETURN_IF_ERROR(
        moe::ValidateJobSpec(*spec).WithPrefix("with world size " + std::to_string(w)));
    MOE_ASSIGN_OR_RETURN(*store, moe::parallel::OpenStore(f.rendezvous));
    moe::SetLogPrefix("rank" + std::to_string(*rank));
  }
  moe::parallel::GroupOptions go;
  go.backend = place.device.is_cuda() ? "nccl" : "gloo";
  go.cuda_device = place.device.is_cuda() ? place.device.index : 0;
  go.timeout_seconds = spec->parallelism.timeout_seconds;
  go.hostname = f.hostname;
  return moe::parallel::ProcessGroups::Create(
      w, *rank, static_cast<int>(spec->parallelism.pipeline_parallel),
      static_cast<int>(spec->parallelism.expert_parallel), store->get(), go);
}

void PrintSummary(const moe::train::TrainResult& r) {
  std::fprintf(
      stderr,
      "summary: steps %lld-%lld | loss %.4f -> %.4f (x%.3f) | %.0f tokens/s | %.4f TFLOP/s per "
      "device | "
      "MFU %.1f%% (against %s) | %s, %s | peak memory %.1f MiB on rank 0 (activations %.1f MiB)\n",
      static_cast<long long>(r.first_step), static_cast<long long>(r.last_step), r.first_loss,
      r.last_loss, r.last_loss / r.first_loss, r.mean_tokens_per_second, r.mean_tflops_per_device,
      r.mean_mfu * 100, r.peak_source.c_str(), r.device.c_str(), r.precision.c_str(),
      static_cast<double>(r.peak_memory_bytes) / 1048576.0,
      static_cast<double>(r.peak_activation_bytes) / 1048576.0);
}

// --describe: the model, and the memory of the job's layout (with the flags' overrides).
int Describe(const Flags& f, moe::JobSpec spec) {
  if (f.nproc > 0) spec.parallelism.world_size = f.nproc;
  if (moe::Status st = moe::ValidateJobSpec(spec); !st.ok())
    return Fail(st.WithPrefix("--describe"));
  if (f.device_memory_gb < 0)
    return Fail(moe::InvalidArgumentError("--device-memory-gb: must be > 0"));
  const std::string device = f.device.empty() ? spec.resources.device : f.device;
  const bool gpu = device.rfind("cuda", 0) == 0;
  const std::string precision =
      f.precision.empty() ? spec.resources.precision.value_or(gpu ? "bf16" : "fp32") : f.precision;
  const bool bf16 = precision != "fp32";  // fp8 keeps bf16 activations
  double capacity = f.device_memory_gb * 1e9;
  if (capacity == 0 && gpu) {
    auto cluster = moe::LoadClusterProfile(f.cluster.empty() ? "gb200-nvl72" : f.cluster);
    if (!cluster.ok()) return Fail(cluster.status().WithPrefix("--cluster"));
    capacity = cluster->memory_gb * 1e9;
  } else if (capacity == 0) {
    capacity = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
               static_cast<double>(::sysconf(_SC_PAGESIZE));
  }
  std::printf("%s", moe::train::DescribeJob(spec, bf16 ? 2 : 4, capacity).c_str());
  return moe::kExitOk;
}

// One rank (or the whole job when W = 1): place it, build its communicators, train.
// The CPU SGEMM peak from `path` ("<flop/s> <source>"), or measured (with this process's threads)
// and written there (atomically: a temporary file renamed) when it is missing or `measure` is set.
moe::train::PeakFlops CachedCpuPeak(const std::string& path, bool measure) {
  moe::train::PeakFlops peak;
  if (!measure) {
    if (std::FILE* in = std::fopen(path.c_str(), "r")) {
      char source[512] = {0};
      const int n = std::fscanf(in, "%lf %511[^\n]", &peak.flops_per_second, source);
      std::fclose(in);
      if (n == 2 && peak.flops_per_second > 0) {
        peak.source = std::string(source) + " (measured once by this worker)";
        return peak;
      }
    }
  }
  peak = moe::train::MeasureCpuSgemmPeak();
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  if (std::FILE* out = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(out, "%.6e %s\n", peak.flops_per_second, peak.source.c_str());
    if (std::fclose(out) == 0) std::rename(tmp.c_str(), path.c_str());
  }
  return peak;
}

int RunRank(const Flags& f, moe::JobSpec spec) {
  moe::kernels::SetNumThreads(static_cast<int>(f.threads));
  const std::string where = f.device.empty() ? spec.resources.device : f.device;
  const int rank_hint = f.rank_mode() ? static_cast<int>(std::max<int64_t>(f.rank, 0)) : 0;
  auto place = moe::PlaceRank(where, f.precision, rank_hint);  // the one place the device is chosen
  if (!place.ok()) return Fail(place.status());
  std::unique_ptr<moe::parallel::KvStore> store;
  int rank = 0;
  auto groups = MakeGroups(f, &spec, &rank, *place, &store);
  if (!groups.ok()) return Fail(groups.status());
  moe::train::TrainerOptions options;
  options.stop_at_step = f.steps;
  options.checkpoint_dir = f.checkpoint_dir;
  options.checkpoint_interval = f.checkpoint_interval;
  options.resume = f.resume;
  options.init_from = f.init_from;
  options.metrics_out = f.metrics_out;
  options.inject_step_delay = f.inject_delay;
  options.data_roots = f.data_roots;
  options.checkpoint_roots = f.checkpoint_roots;
  if (!f.job_id.empty()) {
    options.owner =
        moe::checkpoint::OwnerClaim{f.job_id, f.job_name, f.job_owner, f.epoch, f.attempt};
  }
  options.placement = *place;
  if (!f.peak_cache.empty() && !place->device.is_cuda()) {
    const moe::train::PeakFlops peak = CachedCpuPeak(f.peak_cache, /*measure=*/false);
    options.peak_flops = peak.flops_per_second;
    options.peak_source = peak.source;
  }
  // SIGTERM or SIGINT (see OnStopSignal): installed in main, before anything that can take long.
  options.should_stop =
      AtStepBoundary;  // asked at every step boundary, the first right before step 1
  options.on_protected = [](bool on) {  // nested: a save within the agreed stop keeps it protected
    if (g_protected.fetch_add(on ? 1 : -1) == 1 && !on)
      g_stop_ms.store(MonotonicMs());  // deadline from now
  };
  std::thread(StopWatchdog).detach();
  moe::parallel::SetCollectiveFailureHandler(&OnUnwaitedCollectiveFailure);
  if (g_report != nullptr) {
    options.on_step = [](const moe::train::StepMetrics& m) {
      std::fprintf(g_report, "%s\n", moe::train::MetricsJson(m).c_str());
      std::fflush(g_report);
    };
  }
  auto result = moe::train::Train(spec, (*groups)->ctx(), options);
  if (!result.ok()) {
    MOE_LOG(ERROR) << "training failed: " << result.status();
    return Fail(result.status());
  }
  if (result->stopped_early) {
    if (rank == 0)
      std::fprintf(stderr, "moe-train: stopped after step %lld (asked to stop)\n",
                   static_cast<long long>(result->last_step));
    moe::RankEnd end = moe::StoppedRankEnd("stopped after step " +
                                           std::to_string(result->last_step) + " (asked to stop)");
    end.checkpoint_step = result->checkpoint_step;
    return Finish(end);
  }
  if (rank == 0 && result->last_step >= result->first_step) PrintSummary(*result);
  moe::RankEnd done;
  done.checkpoint_step = result->checkpoint_step;
  return Finish(done);
}

// moe-train --version: this build's version and its GPU libraries, each with where it came from.
int PrintVersion() {
  std::printf("moe-train %s\n", MOE_VERSION);
  std::printf("%s", moe::kernels::FormatGpuLibraries(moe::kernels::GpuLibraries()).c_str());
  const std::string nccl = moe::parallel::NcclVersion();
  std::printf("nccl %s\n", nccl.empty() ? "- (not built: no NCCL library at configure)"
                                        : (nccl + " (linked)").c_str());
  return moe::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that dies closes its sockets; writing to them must be an error Gloo reports (EPIPE), not
  // a signal that kills this rank before it can say what happened.
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  Flags f;
  moe::ArgParser args = MakeParser(&f);
  if (moe::Status st = args.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "moe-train: %s\n", st.message().c_str());
    return moe::kExitBadInput;
  }
  if (args.help_requested()) {
    std::printf("%s", args.Usage().c_str());
    return moe::kExitOk;
  }
  if (f.version) return PrintVersion();
  if (!f.measure_peak.empty()) {
    moe::kernels::SetNumThreads(static_cast<int>(f.threads));
    return CachedCpuPeak(f.measure_peak, /*measure=*/true).flops_per_second > 0
               ? moe::kExitOk
               : moe::kExitCannotRun;
  }
  if (moe::Status st = CheckFlags(&f); !st.ok()) return Fail(st);
  auto spec = LoadSpec(f);
  if (!spec.ok()) return Fail(spec.status());
  if (f.expert_parallel > 0) spec->parallelism.expert_parallel = f.expert_parallel;
  if (f.pipeline_parallel > 0) spec->parallelism.pipeline_parallel = f.pipeline_parallel;
  if (f.describe) return Describe(f, *spec);
  // A job whose world size is above 1 runs that many local ranks unless this process is one rank of
  // it.
  if (f.nproc == 0 && !f.rank_mode() && spec->parallelism.world_size > 1)
    f.nproc = spec->parallelism.world_size;
  if (f.nproc > 0) {
    if (f.rank_mode())
      return Fail(
          moe::InvalidArgumentError("--nproc: not with --rank, --world-size or --rendezvous"));
    return RunLauncher(f, *spec, argc, argv);
  }
  return RunRank(f, *spec);
}
