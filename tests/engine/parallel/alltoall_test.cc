// The Gloo all-to-all-v and the token dispatcher built on it, with random skewed counts (zero rows,
// a rank that receives nothing), checked exactly against a reference of their meaning. Ranks run as
// threads of this process, each with its own Gloo context, meeting through a FileStore.
#include <gtest/gtest.h>

#include "tests/testing/ranks.h"
#include "tests/testing/testing.h"
#include "worker/engine/parallel/dispatcher.h"
#include "worker/engine/parallel/process_group.h"

namespace moe::parallel {
namespace {

using moe::testing::RunGlooGroup;
using moe::testing::Values;

// The value of row i of the block rank s sends to rank d: unique, so misplaced rows show.
double Cell(int s, int d, int64_t i, int64_t c) {
  return s * 1e6 + d * 1e4 + static_cast<double>(i) * 10 + static_cast<double>(c);
}

TEST(GlooAllToAllV, SkewedCountsZeroRowsAndARankThatReceivesNothing) {
  const int n = 3;
  const int64_t width = 5;
  // counts[s][d]: rows rank s sends to rank d. Rank 2 receives nothing; rank 1 sends nothing to
  // itself.
  const std::vector<std::vector<int64_t>> counts = {{4, 0, 0}, {7, 0, 0}, {1, 13, 0}};
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    std::vector<int64_t> send_rows(n), recv_rows(n);
    int64_t send_total = 0, recv_total = 0;
    for (int d = 0; d < n; ++d) {
      send_rows[d] = counts[r][d];
      send_total += counts[r][d];
    }
    for (int s = 0; s < n; ++s) {
      recv_rows[s] = counts[s][r];
      recv_total += counts[s][r];
    }
    Tensor send = Tensor::Empty({send_total, width}, DType::kF64),
           recv = Tensor::Empty({recv_total, width}, DType::kF64);
    int64_t row = 0;
    for (int d = 0; d < n; ++d)
      for (int64_t i = 0; i < counts[r][d]; ++i, ++row)
        for (int64_t c = 0; c < width; ++c) send.data<double>()[row * width + c] = Cell(r, d, i, c);
    moe::testing::Poison(recv);
    Status st = comm.AllToAllV(send, send_rows, recv, recv_rows);
    ASSERT_TRUE(st.ok()) << st;
    row = 0;
    for (int s = 0; s < n; ++s)
      for (int64_t i = 0; i < counts[s][r]; ++i, ++row)
        for (int64_t c = 0; c < width; ++c)
          ASSERT_EQ(recv.data<double>()[row * width + c], Cell(s, r, i, c)) << "rank " << r;
    // Host collectives on the same group.
    std::vector<int64_t> blocks(n * 2), got(n * 2);
    for (int d = 0; d < n; ++d) {
      blocks[d * 2] = r * 10 + d;
      blocks[d * 2 + 1] = -r;
    }
    ASSERT_TRUE(comm.AllToAllHost(blocks.data(), got.data(), 2).ok());
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(got[s * 2], s * 10 + r);
      EXPECT_EQ(got[s * 2 + 1], -s);
    }
    double sum[2] = {static_cast<double>(r), 1.0};
    ASSERT_TRUE(comm.AllReduceSumHost(sum, 2).ok());
    EXPECT_EQ(sum[0], 3.0);
    EXPECT_EQ(sum[1], 3.0);
    int64_t token = r == 1 ? 42 : 0;
    ASSERT_TRUE(comm.BroadcastHost(&token, sizeof(token), 1).ok());
    EXPECT_EQ(token, 42);
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

TEST(TokenDispatcher, DispatchDeliversEachExpertsRowsAndCombineInvertsIt) {
  const int n = 2;
  const int64_t experts = 6, width = 3;  // 3 local experts per rank
  // Per source rank, rows per global expert (grouped by expert, as the permute leaves them).
  // Rank 1 sends every row to rank 0's experts: rank 1 receives nothing.
  const std::vector<std::vector<int64_t>> counts = {{2, 0, 3, 0, 0, 0}, {0, 5, 1, 0, 0, 0}};
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    PhaseTimer phases(MakeHostPhaseClock());
    TokenDispatcher disp(&comm, experts, &phases);
    int64_t rows = 0;
    for (int64_t c : counts[r]) rows += c;
    Tensor xp = Tensor::Empty({rows, width}, DType::kF64);
    int64_t row = 0;
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t i = 0; i < counts[r][e]; ++i, ++row)
        for (int64_t c = 0; c < width; ++c)
          xp.data<double>()[row * width + c] = r * 1000 + e * 100 + i * 10 + c;
    TokenDispatcher::Route route;
    TokenDispatcher::InFlight moving;
    ASSERT_TRUE(disp.DispatchStart(xp, counts[r], &route, &moving).ok());
    ASSERT_TRUE(moving.op != nullptr)
        << "EP = 2: the rows are in flight between the start and the finish";
    auto local = disp.Finish(&moving, route);
    ASSERT_TRUE(local.ok()) << local.status();
    // Reference: this rank's experts, each with the rows of rank 0 then rank 1, in order.
    std::vector<double> expect;
    std::vector<int64_t> offsets = {0};
    for (int64_t le = 0; le < experts / n; ++le) {
      const int64_t e = r * (experts / n) + le;
      for (int s = 0; s < n; ++s)
        for (int64_t i = 0; i < counts[s][e]; ++i)
          for (int64_t c = 0; c < width; ++c) expect.push_back(s * 1000 + e * 100 + i * 10 + c);
      offsets.push_back(static_cast<int64_t>(expect.size()) / width);
    }
    EXPECT_EQ(route.local_offsets, offsets) << "rank " << r;
    EXPECT_EQ(Values(*local), expect) << "rank " << r;
    if (r == 1) {
      EXPECT_EQ(local->dim(0), 0) << "rank 1 receives nothing";
    }
    // Experts "compute" (double every row); combine brings each result back to its row.
    for (int64_t i = 0; i < local->numel(); ++i) local->data<double>()[i] *= 2;
    ASSERT_TRUE(disp.CombineStart(*local, route, &moving).ok());
    auto back = disp.Finish(&moving, route);
    ASSERT_TRUE(back.ok()) << back.status();
    const auto orig = Values(xp);
    std::vector<double> doubled;
    for (double v : orig) doubled.push_back(2 * v);
    EXPECT_EQ(Values(*back), doubled) << "rank " << r;
    EXPECT_GT(phases.Resolve().alltoall, 0.0) << "all-to-all time is measured";
  });
}

TEST(GlooTimeout, AHungPeerFailsTheOthersWithinTheTimeout) {
  // Rank 1 never joins the all-reduce: rank 0 must give up after the timeout with a clear error.
  moe::testing::RunAgainstHungPeer([](Communicator& comm) {
    comm.SetPhase("step 7: gradient all-reduce");
    double x = 1;
    Status st = comm.AllReduceSumHost(&x, 1);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
    EXPECT_NE(st.message().find("step 7: gradient all-reduce: all_reduce over gloo"),
              std::string::npos)
        << st;
    // The group stays failed.
    EXPECT_FALSE(comm.Barrier().ok());
  });
}

}  // namespace
}  // namespace moe::parallel
