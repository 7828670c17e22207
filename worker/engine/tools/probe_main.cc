// moe-probe: measures this machine as a planner cluster profile (`moectl plan --cluster local`,
// docs/planning.md). A CPU "device" is what one rank of a W-rank job gets here: cores / W threads
// (moe-train --nproc W gives each rank that many), so the profile depends on --ranks
// (LocalProfileForRanks: the rank's share of the machine).
//
//   moe-probe [--ranks W] [--seconds S]     prints the profile as YAML on stdout; progress on
//   stderr
//
// Measured on all cores: the SGEMM rate through the engine's fastest BLAS (what MFU is counted
// against) and the copy bandwidth (memory-bound passes); one thread's copy bandwidth (what moves
// bytes between ranks on one machine: Gloo over loopback copies through the kernel); the physical
// memory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "common/args.h"
#include "common/plan_profiles.h"
#include "kernels/runtime.h"
#include "worker/engine/train/peak.h"

namespace {

// Best copy bandwidth (bytes read + written per second) of `threads` threads, each copying its own
// `bytes_per_thread` buffer, over about `seconds`.
double CopyBandwidth(int threads, size_t bytes_per_thread, double seconds) {
  std::vector<std::vector<char>> src(static_cast<size_t>(threads)),
      dst(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    src[static_cast<size_t>(t)].assign(bytes_per_thread, 1);
    dst[static_cast<size_t>(t)].assign(bytes_per_thread, 0);
  }
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < 50; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::memcpy(dst[static_cast<size_t>(t)].data(), src[static_cast<size_t>(t)].data(),
                    bytes_per_thread);
      });
    }
    for (auto& w : workers) w.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes_per_thread) * threads / dt);
    if (run >= 3 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      break;
  }
  return best;
}

std::string Today() {
  char b[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(b, sizeof(b), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t ranks = 1;
  double seconds = 1.0;
  moe::ArgParser args("moe-probe",
                      "Measures this machine as a planner cluster profile (YAML on stdout).");
  args.AddInt("ranks", &ranks,
              "ranks of a job sharing this machine: a device is their share of it (default 1)");
  args.AddDouble("seconds", &seconds, "time per measurement (default 1)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (ranks < 1 || ranks > 4096)
    return std::fprintf(stderr, "moe-probe: --ranks %lld: expected 1 to 4096\n",
                        static_cast<long long>(ranks)),
           2;
  if (!(seconds > 0 && seconds <= 60))
    return std::fprintf(stderr, "moe-probe: --seconds %g: expected (0, 60]\n", seconds), 2;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  moe::kernels::SetNumThreads(cores);
  std::fprintf(stderr, "moe-probe: SGEMM with %d thread(s)...\n", cores);
  const moe::train::PeakFlops peak = moe::train::MeasureCpuSgemmPeak(1024, seconds);
  std::fprintf(stderr, "moe-probe: copy bandwidth...\n");
  const double machine = CopyBandwidth(cores, size_t{64} << 20, seconds / 2);
  const double copy1 = cores == 1 ? machine : CopyBandwidth(1, size_t{64} << 20, seconds / 2);
  const double ram =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  moe::ClusterProfile c;
  c.name = "local";
  c.description = "this machine, measured by moe-probe: " + std::to_string(cores) + " core(s)";
  c.device = "cpu";
  c.peak_bf16_tflops = peak.flops_per_second / 1e12;
  c.memory_gb = ram / 1e9;
  c.memory_tbps = machine / 1e12;
  c.scale_up_gbps = copy1 / 1e9;
  c.scale_out_gbps = copy1 / 1e9;
  c.domain_size = cores;
  c.p2p_latency_us = 0;
  c.sources = {"moe-probe, " + Today() + ": " + peak.source,
               "memory bandwidth: the copy bandwidth (read + write) of " + std::to_string(cores) +
                   " thread(s), 64 MiB each",
               "scale-up and scale-out: one thread's copy bandwidth (ranks on one machine exchange "
               "through loopback)"};
  const moe::ClusterProfile share = moe::LocalProfileForRanks(c, ranks);
  std::printf(
      "# A cluster profile for moectl plan, measured by moe-probe --ranks %lld "
      "(docs/planning.md).\n%s",
      static_cast<long long>(ranks), moe::ToYaml(moe::ClusterProfileToNode(share)).c_str());
  return 0;
}
