// The routing plan's CUDA kernels (kernels/cuda/routing_kernels.cuh), run on the CPU by the CUDA
// emulator (cuda_emulator.h) with the launch shapes of permute.cu, against the host plan
// (kernels/permute.h BuildDispatchPlan): counts, row of each slot and token of each row must be
// equal, for awkward sizes (a partial last pass, empty experts, one expert taking most slots,
// experts that are never chosen at the end, a single token), two block sizes, several count-kernel
// grids, and an out-of-range expert id (recorded in the flags, counted as expert 0, the plan still
// a permutation). Outputs start poisoned, so a slot or row never written fails.
#include "kernels/permute.h"
#include "tests/gpu/cuda_emulator.h"
// The kernels after the emulator, which supplies their primitives.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/routing_kernels.cuh"

namespace {

namespace routing = moe::kernels::cuda::routing;

struct Case {
  std::string name;
  int64_t tokens, k, experts;
  int threads, count_blocks;
  double skew;       // share of choices that go to expert 0's band first
  bool bad = false;  // one id out of range
};

int g_failures = 0;

void Check(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.tokens * 131 + c.experts));
  const int64_t slots = c.tokens * c.k, band = c.experts / c.k;
  std::vector<int32_t> idx(static_cast<size_t>(slots));
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < c.k;
         ++j) {  // distinct per token: choice j from band j (skewed to its start)
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      const int64_t off = u < c.skew ? 0 : static_cast<int64_t>(u * static_cast<double>(band));
      idx[static_cast<size_t>(t * c.k + j)] =
          static_cast<int32_t>(j * band + std::min(off, band - 1));
    }
  }
  if (c.bad) idx[static_cast<size_t>(slots / 2)] = static_cast<int32_t>(c.experts + 3);
  std::vector<int32_t> ref_idx = idx;
  if (c.bad) ref_idx[static_cast<size_t>(slots / 2)] = 0;  // what the kernels count it as
  const moe::kernels::DispatchPlan ref =
      moe::kernels::BuildDispatchPlan(ref_idx.data(), c.tokens, c.k, c.experts);

  std::vector<unsigned long long> counts(static_cast<size_t>(c.experts), 0);
  std::vector<int32_t> ros(static_cast<size_t>(slots), -7), tor(static_cast<size_t>(slots), -7);
  unsigned flags = 0;
  moe::emu::Launch(routing::CountExpertsKernel, dim3(static_cast<unsigned>(c.count_blocks)),
                   dim3(static_cast<unsigned>(c.threads)),
                   sizeof(unsigned) * static_cast<size_t>(c.experts), idx.data(), slots, c.experts,
                   counts.data(), &flags);
  moe::emu::Launch(routing::FillExpertRowsKernel, dim3(static_cast<unsigned>(c.experts)),
                   dim3(static_cast<unsigned>(c.threads)), routing::FillSharedBytes(c.threads),
                   static_cast<const int32_t*>(idx.data()), slots, c.k, c.experts,
                   static_cast<const unsigned long long*>(counts.data()), ros.data(), tor.data());
  int bad = 0;
  for (int64_t e = 0; e < c.experts; ++e)
    bad += counts[static_cast<size_t>(e)] !=
           static_cast<unsigned long long>(ref.counts[static_cast<size_t>(e)]);
  for (int64_t s = 0; s < slots; ++s) {
    bad += ros[static_cast<size_t>(s)] != ref.row_of_slot[static_cast<size_t>(s)];
    bad += tor[static_cast<size_t>(s)] != ref.token_of_row[static_cast<size_t>(s)];
  }
  const bool flag_ok = flags == (c.bad ? routing::kBadExpertBit : 0u);
  const bool ok = bad == 0 && flag_ok;
  std::printf(
      "%-40s %-6s %lld slots, %lld experts, %d threads, %d count blocks: %d mismatches, flags %u\n",
      c.name.c_str(), ok ? "ok" : "FAIL", static_cast<long long>(slots),
      static_cast<long long>(c.experts), c.threads, c.count_blocks, bad, flags);
  g_failures += ok ? 0 : 1;
}

}  // namespace

int main() {
  const std::vector<Case> cases = {
      {"one token", 1, 3, 7, 64, 1, 0.0},
      {"partial pass, 2 warps", 97, 3, 10, 64, 3, 0.3},
      {"several passes, skewed", 700, 4, 16, 64, 5, 0.8},
      {"8 warps, many count blocks", 300, 8, 24, 256, 7, 0.5},
      {"out-of-range id", 150, 2, 6, 64, 2, 0.2, true},
      {"more blocks than slots", 5, 2, 4, 32, 9, 0.0},
  };
  for (const Case& c : cases) Check(c);
  std::printf("%s: %d of %zu routing cases failed\n", g_failures ? "FAIL" : "PASS", g_failures,
              cases.size());
  return g_failures ? 1 : 0;
}
