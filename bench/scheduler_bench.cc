// Placement time of a 9,216-rank job (EP 64, groups inside one rack) on a simulated cluster of 1,820
// racks x 72 devices (131,040 GPUs), next to a sort of all the free slots in the same run (for scale:
// placement groups the slots by interned rack and orders only the chosen racks').
//
//   moe-bench-scheduler [--racks 1820] [--per-rack 72] [--world 9216] [--ep 64] [--busy 0.3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>

#include "common/args.h"
#include "controller/scheduler.h"
#include "worker/engine/rng.h"

int main(int argc, char** argv) {
  int64_t racks = 1820, per_rack = 72, world = 9216, ep = 64, reps = 5;
  double busy = 0.3;
  moe::ArgParser args("moe-bench-scheduler", "Scheduler placement time on a large simulated cluster.");
  args.AddInt("racks", &racks, "racks (NVLink domains), default 1820");
  args.AddInt("per-rack", &per_rack, "devices per rack (18 nodes x 4 GPUs), default 72");
  args.AddInt("world", &world, "ranks of the job, default 9216");
  args.AddInt("ep", &ep, "expert parallelism, default 64");
  args.AddDouble("busy", &busy, "fraction of racks running other jobs (and one node of every fourth rack down), default 0.3");
  args.AddInt("reps", &reps, "repetitions (median), default 5");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  moe::Rng rng(7);
  std::vector<moe::controller::Slot> free;
  for (int64_t r = 0; r < racks; ++r) {
    if (rng.Uniform() < busy) continue;  // a rack taken by other jobs
    const int64_t down = r % 4 == 0 ? static_cast<int64_t>(rng.Below(static_cast<uint64_t>(per_rack / 4))) : -1;
    for (int64_t d = 0; d < per_rack; ++d) {
      if (d / 4 == down) continue;  // a node out of service
      const std::string node = "r" + std::to_string(r) + "n" + std::to_string(d / 4);
      free.push_back({node + "g" + std::to_string(d % 4), "rack" + std::to_string(r), node, "cuda:" + std::to_string(d % 4)});
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
  std::printf("placement of %lld ranks (EP %lld within a rack) on %lld racks x %lld devices, %zu free\n",
              static_cast<long long>(world), static_cast<long long>(ep), static_cast<long long>(racks),
              static_cast<long long>(per_rack), free.size());
  std::printf("  median placement    %.1f ms (%zu ranks placed)\n", p * 1e3, placed);
  std::printf("  sort of free slots  %.1f ms (for scale: placement orders only the chosen racks' slots)\n", s * 1e3);
  std::printf("RESULT scheduler_placement_ms %.1f\n", p * 1e3);
  std::printf("RESULT scheduler_placement_over_sort_ratio %.2f\n", p / s);
  return 0;
}
