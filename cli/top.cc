#include "cli/top.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "cli/format.h"

namespace moe::cli {

std::string TopScreen(const moe::v1::ListJobsResponse& jobs,
                      const moe::v1::ListWorkersResponse& workers) {
  std::vector<std::vector<std::string>> rows;
  std::map<std::string, double> rack_tflops;
  for (const auto& j : jobs.jobs()) {
    const auto& m = j.last_metrics();
    std::string strag = "-";
    if (m.stragglers_size() > 0) {
      strag.clear();
      for (int r : m.stragglers()) strag += (strag.empty() ? "" : ",") + std::to_string(r);
    }
    const double a2a = m.step_seconds() > 0 ? m.alltoall_seconds() / m.step_seconds() : 0;
    // Throughput is of what runs now: a preempted, requeued, stopping or finished job's last step
    // shows as "-" and adds nothing to its racks (their workers may run another job).
    const bool running = j.state() == moe::v1::RUNNING && m.step() > 0;
    rows.push_back(
        {j.id(), StateName(j.state()),
         m.step() > 0 ? std::to_string(m.step()) + "/" + std::to_string(m.total_steps()) : "-",
         running ? FormatNumber(m.tflops_per_device()) : "-",
         running ? FormatNumber(m.mfu() * 100, 1) + "%" : "-",
         FormatNumber(m.tokens_per_second(), 0), FormatNumber(m.loss()),
         FormatNumber(m.step_seconds(), 3), FormatNumber(a2a * 100, 1) + "%", strag});
    // A rack's TFLOP/s: each of the job's ranks there does tflops_per_device.
    if (!running) continue;
    for (const auto& p : j.placement()) rack_tflops[p.rack()] += m.tflops_per_device();
  }
  std::string out = "JOBS\n" + Table({"ID", "STATE", "STEP", "TFLOP/S/DEV", "MFU", "TOKENS/S",
                                      "LOSS", "STEP S", "A2A", "STRAGGLERS"},
                                     rows);
  std::map<std::string, std::map<moe::v1::WorkerState, int>> racks;
  for (const auto& w : workers.workers()) racks[w.rack()][w.state()]++;
  std::vector<std::vector<std::string>> rrows;
  for (auto& [rack, counts] : racks) {
    rrows.push_back({rack, std::to_string(counts[moe::v1::BUSY]),
                     std::to_string(counts[moe::v1::IDLE]), std::to_string(counts[moe::v1::LOST]),
                     std::to_string(counts[moe::v1::DRAINED]), FormatNumber(rack_tflops[rack])});
  }
  out += "\nRACKS\n" + Table({"RACK", "BUSY", "IDLE", "LOST", "DRAINED", "TFLOP/S"}, rrows);
  return out;
}

int Top(const Fetch& fetch, double interval, bool once,
        const std::function<int(const Status&)>& fail) {
  const bool tty = ::isatty(STDOUT_FILENO);
  while (true) {
    moe::v1::ListJobsResponse jobs;
    moe::v1::ListWorkersResponse workers;
    Status st = fetch(&jobs, &workers);
    if (!st.ok()) return fail(st);
    const std::string screen = TopScreen(jobs, workers);
    if (tty && !once) std::printf("\033[H\033[2J");
    std::printf("%s", screen.c_str());
    std::fflush(stdout);
    if (once) return 0;
    if (!tty) std::printf("\n");
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
  }
}

}  // namespace moe::cli
