// MoE token dispatch + combine over Gloo on loopback: two ranks (processes), tokens 4096, hidden
// 1024, top-8 of 16 experts (EP 2), fp32 rows. Reports throughput and, as the ratio, against the
// data-movement floor measured in the same run: a memcpy of the same bytes on this machine. Then,
// between the same two ranks, deterministic training's gradient reductions: an f64 all-reduce and
// reduce-scatter of --reduce-mb, as the buffer's bytes per second per rank and against the token
// all-to-all's wire rate of the same run.
//
//   moe-bench-alltoall [--tokens 4096] [--hidden 1024] [--top-k 8] [--experts 16] [--iters 10]
//                      [--reduce-mb 256]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/args.h"
#include "common/file_util.h"
#include "common/rng.h"
#include "kernels/permute.h"
#include "kernels/runtime.h"
#include "worker/engine/parallel/dispatcher.h"
#include "worker/engine/parallel/gloo_comm.h"
#include "worker/engine/parallel/process_group.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds of `iters` calls of fn after a warm-up call, the ranks aligned by a barrier.
template <typename Fn>
double MedianSeconds(moe::parallel::Communicator* comm, int iters, Fn&& fn) {
  std::vector<double> times;
  for (int it = 0; it < iters + 1; ++it) {
    (void)comm->Barrier();
    const double t0 = Now();
    if (!fn()) return -1;
    if (it > 0) times.push_back(Now() - t0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The f64 all-reduce's and reduce-scatter's medians over a buffer of `mb` MiB (fp32 values, as
// gradients are, so that the sums stay exact).
void TimeReductions(moe::parallel::Communicator* comm, int64_t mb, int iters, double* all_reduce,
                    double* reduce_scatter) {
  const int64_t n = mb * 1024 * 1024 / 8;
  moe::Tensor g = moe::Tensor::Empty({n}, moe::DType::kF64);
  for (int64_t i = 0; i < n; ++i) g.data<double>()[i] = static_cast<float>(i % 977) * 1e-3f;
  *all_reduce = MedianSeconds(comm, iters, [&] { return comm->AllReduceSum(g).ok(); });
  const std::vector<int64_t> counts = {n / 2, n - n / 2};
  *reduce_scatter =
      MedianSeconds(comm, iters, [&] { return comm->ReduceScatterSum(g, counts).ok(); });
}

int RunRank(int rank, const std::string& dir, int64_t tokens, int64_t hidden, int64_t k,
            int64_t experts, int iters, int64_t reduce_mb, int fd) {
  moe::parallel::FileStore store(dir);
  moe::parallel::GroupOptions o;
  o.timeout_seconds = 120;
  auto comm = moe::parallel::CreateGlooCommunicator(rank, 2, &store, o);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  // Routing: k distinct experts per token, uniform.
  moe::Rng rng(100 + static_cast<uint64_t>(rank));
  std::vector<int32_t> idx(static_cast<size_t>(tokens * k));
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) all[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pick = j + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(experts - j)));
      std::swap(all[static_cast<size_t>(j)], all[static_cast<size_t>(pick)]);
      idx[static_cast<size_t>(t * k + j)] = all[static_cast<size_t>(j)];
    }
  }
  moe::kernels::DispatchPlan plan = moe::kernels::BuildDispatchPlan(idx.data(), tokens, k, experts);
  moe::Tensor xp = moe::Tensor::Empty({tokens * k, hidden}, moe::DType::kF32);
  for (int64_t i = 0; i < xp.numel(); ++i)
    xp.data<float>()[i] = static_cast<float>(i % 1000) * 1e-3f;
  moe::parallel::TokenDispatcher disp(comm->get(), experts, nullptr);
  std::vector<double> times;
  int64_t remote_rows = 0;
  for (int it = 0; it < iters + 2; ++it) {
    (void)(*comm)->Barrier();
    const double t0 = Now();
    moe::parallel::TokenDispatcher::Route route;
    moe::parallel::TokenDispatcher::InFlight moving;
    if (!disp.DispatchStart(xp, plan.counts, &route, &moving).ok()) return 1;
    auto local = disp.Finish(&moving, route);
    if (!local.ok()) return 1;
    if (!disp.CombineStart(*local, route, &moving).ok()) return 1;
    auto back = disp.Finish(&moving, route);
    if (!back.ok()) return 1;
    const double dt = Now() - t0;
    if (it >= 2) times.push_back(dt);
    remote_rows = route.send_rows[static_cast<size_t>(1 - rank)];
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  // The floor: copying the same bytes once each way within this process.
  const size_t bytes = static_cast<size_t>(tokens * k * hidden) * sizeof(float);
  std::vector<char> a(bytes, 1), b(bytes);
  std::vector<double> copies;
  for (int it = 0; it < 5; ++it) {
    const double t0 = Now();
    std::memcpy(b.data(), a.data(), bytes);
    std::memcpy(a.data(), b.data(), bytes);
    copies.push_back(Now() - t0);
  }
  std::sort(copies.begin(), copies.end());
  double all_reduce = 0, reduce_scatter = 0;
  TimeReductions(comm->get(), reduce_mb, 3, &all_reduce, &reduce_scatter);
  if (all_reduce < 0 || reduce_scatter < 0) return 1;
  double result[6] = {median,
                      copies[copies.size() / 2],
                      static_cast<double>(remote_rows),
                      static_cast<double>(bytes),
                      all_reduce,
                      reduce_scatter};
  if (write(fd, result, sizeof(result)) != sizeof(result)) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 4096, hidden = 1024, k = 8, experts = 16, iters = 10, reduce_mb = 256;
  moe::ArgParser args("moe-bench-alltoall",
                      "MoE dispatch + combine throughput over Gloo on loopback (EP 2).");
  args.AddInt("tokens", &tokens, "tokens per rank (default 4096)");
  args.AddInt("hidden", &hidden, "hidden size (default 1024)");
  args.AddInt("top-k", &k, "experts per token (default 8)");
  args.AddInt("experts", &experts, "experts, split over 2 ranks (default 16)");
  args.AddInt("iters", &iters, "timed iterations (default 10)");
  args.AddInt("reduce-mb", &reduce_mb, "MiB of f64 gradients the reductions sum (default 256)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (reduce_mb < 1 || iters < 1) {
    std::fprintf(stderr, "--reduce-mb and --iters: at least 1 each\n");
    return 2;
  }
  if (!moe::parallel::HaveGloo()) {
    std::fprintf(stderr, "this build has no Gloo\n");
    return 1;
  }
  moe::kernels::SetNumThreads(1);
  char tmpl[] = "/tmp/moe-bench-a2a.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  int pipes[2][2];
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    if (pipe(pipes[r]) != 0) return 1;
    pids[r] = fork();
    if (pids[r] == 0)
      _exit(RunRank(r, dir, tokens, hidden, k, experts, static_cast<int>(iters), reduce_mb,
                    pipes[r][1]));
  }
  double res[2][6];
  bool ok = true;
  for (int r = 0; r < 2; ++r) {
    ok = ok && read(pipes[r][0], res[r], sizeof(res[r])) == sizeof(res[r]);
    int st = 0;
    waitpid(pids[r], &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  (void)moe::RemoveAll(dir);
  if (!ok) {
    std::fprintf(stderr, "a rank failed\n");
    return 1;
  }
  const double t = std::max(res[0][0], res[1][0]);
  const double bytes = res[0][3];  // one rank's permuted rows, fp32
  const double wire =
      (res[0][2] + res[1][2]) / 2 * static_cast<double>(hidden) * 4;  // per rank, to the other rank
  const double memcpy_bw = 2 * bytes / std::min(res[0][1], res[1][1]);
  // Dispatch and combine each move every row once: 2 x bytes per rank per iteration.
  const double algo_bw = 2 * bytes / t;
  std::printf(
      "dispatch + combine over gloo/TCP loopback, EP 2: %lld tokens x top-%lld, hidden %lld, "
      "fp32\n",
      static_cast<long long>(tokens), static_cast<long long>(k), static_cast<long long>(hidden));
  std::printf("  median dispatch+combine     %.1f ms per rank\n", t * 1e3);
  std::printf(
      "  rows' bytes moved           %.1f MB per rank per pass (%.1f MB of it to the other rank)\n",
      2 * bytes / 1e6, 2 * wire / 1e6);
  std::printf("  algorithm throughput        %.2f GB/s per rank (wire %.2f GB/s)\n", algo_bw / 1e9,
              2 * wire / t / 1e9);
  std::printf("  memcpy floor (same run)     %.2f GB/s\n", memcpy_bw / 1e9);
  std::printf("RESULT alltoall_dispatch_combine_gbps %.2f\n", algo_bw / 1e9);
  std::printf("RESULT alltoall_over_memcpy_ratio %.3f\n", algo_bw / memcpy_bw);
  // The reductions: the buffer's bytes over the slower rank's median.
  const double reduce_bytes = static_cast<double>(reduce_mb) * 1024 * 1024;
  const double ar = reduce_bytes / std::max(res[0][4], res[1][4]);
  const double rs = reduce_bytes / std::max(res[0][5], res[1][5]);
  const double wire_bw = 2 * wire / t;
  std::printf("f64 gradient reductions over the same ranks, %lld MiB a rank:\n",
              static_cast<long long>(reduce_mb));
  std::printf("  all-reduce        %.3f s, %.2f GB/s per rank\n", reduce_bytes / ar, ar / 1e9);
  std::printf("  reduce-scatter    %.3f s, %.2f GB/s per rank\n", reduce_bytes / rs, rs / 1e9);
  std::printf("RESULT f64_allreduce_gbps %.2f (goal >= 1)\n", ar / 1e9);
  std::printf("RESULT f64_reduce_scatter_gbps %.2f (goal >= 1)\n", rs / 1e9);
  std::printf("RESULT f64_allreduce_over_alltoall_wire %.2f\n", ar / wire_bw);
  return 0;
}
