// Placement time of a 9,216-rank job (EP 64, groups inside one rack) on a simulated cluster of
// 1,820 racks x 72 devices (131,040 GPUs), next to a sort of all the free slots in the same run
// (for scale: placement groups the slots by interned rack and orders only the chosen racks').
//
//   moe-bench-scheduler [--racks 1820] [--per-rack 72] [--world 9216] [--ep 64] [--busy 0.3]
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>

#include "common/args.h"
#include "common/job_spec.h"
#include "common/job_spec_proto.h"
#include "common/log.h"
#include "common/rng.h"
#include "controller/clock.h"
#include "controller/controller.h"
#include "controller/metrics_aggregator.h"
#include "controller/scheduler.h"
#include "controller/state_store.h"

namespace {

struct NullChannel final : moe::controller::WorkerChannel {
  void Send(const moe::v1::ControllerMessage&) override {}
};

moe::JobSpec QueuedSpec(const std::string& name, int world, int64_t priority) {
  moe::JobSpec s;
  s.name = name;
  s.priority = priority;
  s.model = *moe::ModelPreset("tiny");
  s.parallelism.world_size = world;
  s.parallelism.expert_parallel = 1;
  s.data.path = "data/fortunes";
  s.data.micro_batch_size = 1;
  s.data.global_batch_size = world;
  s.checkpoint.dir = "/tmp/moe-bench-scheduler/" + name;
  return s;
}

// A scheduling pass over `queued` jobs that cannot start (the cluster is full): the time of a
// submit (in-memory store), which runs one pass over them all. Median of `reps`.
double PassMs(int workers, int queued, int reps) {
  moe::controller::FakeClock clock;
  moe::controller::MemoryStateStore store;
  moe::controller::MetricsAggregator metrics(std::make_shared<prometheus::Registry>(), clock, {},
                                             60, "bench");
  moe::controller::ControllerConfig config;
  moe::controller::Controller c(store, clock, metrics, config);
  if (!c.Recover().ok()) return -1;
  std::vector<std::unique_ptr<NullChannel>> channels;
  for (int w = 0; w < workers; ++w) {
    moe::v1::Register r;
    r.set_name("w" + std::to_string(w));
    r.set_rack("rack" + std::to_string(w / 64));
    r.set_node("n" + std::to_string(w / 4));
    r.set_device("cpu");
    r.set_memory_bytes(int64_t{64} << 30);
    channels.push_back(std::make_unique<NullChannel>());
    if (!c.Register(r, channels.back().get()).ok()) return -1;
  }
  if (!c.Submit(moe::SpecToProto(QueuedSpec("big", workers, 1000000))).ok())
    return -1;  // fills the cluster
  moe::Rng rng(3);
  for (int i = 0; i < queued; ++i) {
    const int world = 1 << rng.Below(4);
    if (!c.Submit(
              moe::SpecToProto(QueuedSpec("q" + std::to_string(i), world, int64_t(rng.Below(100)))))
             .ok())
      return -1;
  }
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!c.Submit(moe::SpecToProto(QueuedSpec("timed" + std::to_string(i), 2, 50))).ok()) return -1;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t racks = 1820, per_rack = 72, world = 9216, ep = 64, reps = 5;
  double busy = 0.3;
  moe::ArgParser args("moe-bench-scheduler",
                      "Scheduler placement time on a large simulated cluster.");
  args.AddInt("racks", &racks, "racks (NVLink domains), default 1820");
  args.AddInt("per-rack", &per_rack, "devices per rack (18 nodes x 4 GPUs), default 72");
  args.AddInt("world", &world, "ranks of the job, default 9216");
  args.AddInt("ep", &ep, "expert parallelism, default 64");
  args.AddDouble(
      "busy", &busy,
      "fraction of racks running other jobs (and one node of every fourth rack down), default 0.3");
  args.AddInt("reps", &reps, "repetitions (median), default 5");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  moe::Rng rng(7);
  std::vector<moe::controller::Slot> free;
  for (int64_t r = 0; r < racks; ++r) {
    if (rng.Uniform() < busy) continue;  // a rack taken by other jobs
    const int64_t down =
        r % 4 == 0 ? static_cast<int64_t>(rng.Below(static_cast<uint64_t>(per_rack / 4))) : -1;
    for (int64_t d = 0; d < per_rack; ++d) {
      if (d / 4 == down) continue;  // a node out of service
      const std::string node = "r" + std::to_string(r) + "n" + std::to_string(d / 4);
      free.push_back({node + "g" + std::to_string(d % 4), "rack" + std::to_string(r), node,
                      "cuda:" + std::to_string(d % 4)});
    }
  }
  // Workers arrive in no particular order.
  for (size_t i = free.size() - 1; i > 0; --i) std::swap(free[i], free[rng.Below(i + 1)]);
  moe::controller::PlacementRequest req;
  req.world_size = static_cast<int>(world);
  req.expert_parallel = static_cast<int>(ep);
  req.within = "rack";
  req.device_type = "cuda";
  std::vector<double> place_s, sort_s;
  size_t placed = 0;
  for (int64_t i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = moe::controller::Place(req, free);
    place_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!out.ok()) {
      std::fprintf(stderr, "placement failed: %s\n", out.status().ToString().c_str());
      return 1;
    }
    placed = out->size();
    auto copy = free;
    t0 = std::chrono::steady_clock::now();
    std::sort(copy.begin(), copy.end(), [](const auto& a, const auto& b) {
      return std::tie(a.rack, a.node, a.device) < std::tie(b.rack, b.node, b.device);
    });
    sort_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(place_s.begin(), place_s.end());
  std::sort(sort_s.begin(), sort_s.end());
  const double p = place_s[place_s.size() / 2], s = sort_s[sort_s.size() / 2];
  std::printf(
      "placement of %lld ranks (EP %lld within a rack) on %lld racks x %lld devices, %zu free\n",
      static_cast<long long>(world), static_cast<long long>(ep), static_cast<long long>(racks),
      static_cast<long long>(per_rack), free.size());
  std::printf("  median placement    %.1f ms (%zu ranks placed)\n", p * 1e3, placed);
  std::printf(
      "  sort of free slots  %.1f ms (for scale: placement orders only the chosen racks' slots)\n",
      s * 1e3);
  std::printf("RESULT scheduler_placement_ms %.1f\n", p * 1e3);
  std::printf("RESULT scheduler_placement_over_sort_ratio %.2f\n", p / s);
  moe::SetLogLevel(moe::LogLevel::kWarning);  // a thousand submits' log lines
  const double pass = PassMs(512, 1000, static_cast<int>(reps));
  std::printf(
      "scheduling pass over 1000 queued jobs (W 1-8, priorities 0-99) on 512 busy workers\n");
  std::printf("  median pass        %.1f ms (a submit, in-memory store, which runs the pass)\n",
              pass);
  std::printf("RESULT scheduler_pass_1000_queued_ms %.1f\n", pass);
  return pass >= 0 ? 0 : 1;
}
