// The ZeRO collectives (reduce-scatter, all-gather) and the pipeline's point to point (Exchange)
// over Gloo, ranks as threads: equal, unequal and zero counts against a reference of their meaning,
// every element checked; a ring and a pair that exchange in one batch; a peer that never answers;
// and the argument checks every backend shares (on the LocalCommunicator).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "tests/testing/ranks.h"
#include "tests/testing/testing.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/parallel/process_group.h"

namespace moe::parallel {
namespace {

using moe::testing::Poison;
using moe::testing::RandomTensor;
using moe::testing::RunGlooGroup;

std::vector<int64_t> Offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off = {0};
  for (int64_t c : counts) off.push_back(off.back() + c);
  return off;
}

// Rank r's input: its own seed, so every thread can rebuild every rank's input for the reference.
Tensor Input(int r, int64_t n, DType dtype) {
  return RandomTensor({n}, 1000 + static_cast<uint64_t>(r), dtype);
}

// Each rank reduce-scatters its input and checks its range against the sum of all inputs, taken in
// rank order in T (the order the Gloo communicator adds in, so the comparison is exact).
template <typename T>
void CheckReduceScatter(const std::vector<int64_t>& counts) {
  const int n = static_cast<int>(counts.size());
  const std::vector<int64_t> off = Offsets(counts);
  const DType dtype = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    Tensor t = Input(r, off.back(), dtype);
    Status st = comm.ReduceScatterSum(t, counts);
    ASSERT_TRUE(st.ok()) << st;
    std::vector<T> want(static_cast<size_t>(off.back()), T(0));
    for (int s = 0; s < n; ++s) {
      Tensor in = Input(s, off.back(), dtype);
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = s == 0 ? in.data<T>()[i] : want[i] + in.data<T>()[i];
    }
    for (int64_t i = off[r]; i < off[r + 1]; ++i) {
      ASSERT_EQ(t.data<T>()[i], want[static_cast<size_t>(i)]) << "rank " << r << " element " << i;
    }
  });
}

// The f64 all-reduce (deterministic training's gradient sums): every rank ends with the sum of all
// inputs in rank order, bit for bit, whatever the split (fewer elements than ranks too).
void CheckAllReduceF64(int ranks, int64_t n) {
  RunGlooGroup(ranks, [&](int r, Communicator& comm) {
    Tensor t = Input(r, n, DType::kF64);
    Status st = comm.AllReduceSum(t);
    ASSERT_TRUE(st.ok()) << st;
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int s = 0; s < ranks; ++s) {
        const double x = Input(s, n, DType::kF64).data<double>()[i];
        want = s == 0 ? x : want + x;
      }
      ASSERT_EQ(t.data<double>()[i], want) << "rank " << r << " of " << ranks << ", element " << i;
    }
  });
}

TEST(GlooAllReduceF64, RankOrderSumsOnThreeAndFourRanks) {
  CheckAllReduceF64(3, 1031);
  CheckAllReduceF64(4, 3000);
}
TEST(GlooAllReduceF64, FewerElementsThanRanksAndNone) {
  CheckAllReduceF64(3, 2);
  CheckAllReduceF64(2, 0);
}

TEST(GlooReduceScatter, EqualCountsNotAPowerOfTwo) { CheckReduceScatter<float>({257, 257, 257}); }
TEST(GlooReduceScatter, EqualCountsFourRanksF64) { CheckReduceScatter<double>({64, 64, 64, 64}); }
TEST(GlooReduceScatter, UnequalCountsWithAZero) { CheckReduceScatter<double>({5, 0, 11, 1}); }
TEST(GlooReduceScatter, OneRankOwnsEverything) { CheckReduceScatter<float>({0, 0, 33}); }
TEST(GlooReduceScatter, EmptyBuffer) { CheckReduceScatter<double>({0, 0}); }

// The value element i of rank r's range holds (unique, so a misplaced byte shows).
double Owned(int r, int64_t i) { return r * 1000.0 + static_cast<double>(i) + 0.5; }

// Each rank fills only its range (the rest poisoned); after the all-gather every rank has every
// range.
void CheckAllGather(const std::vector<int64_t>& counts, DType dtype) {
  const int n = static_cast<int>(counts.size());
  const std::vector<int64_t> off = Offsets(counts);
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    Tensor t = Tensor::Empty({off.back()}, dtype);
    Poison(t);
    if (dtype == DType::kBF16) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<BFloat16>()[i] = ToBFloat16(std::nanf(""));
    }
    for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) {
      const double v = Owned(r, i);
      if (dtype == DType::kBF16)
        t.data<BFloat16>()[off[r] + i] = ToBFloat16(static_cast<float>(v));
      else
        t.data<double>()[off[r] + i] = v;
    }
    Status st = comm.AllGather(t, counts);
    ASSERT_TRUE(st.ok()) << st;
    for (int s = 0; s < n; ++s) {
      for (int64_t i = 0; i < counts[static_cast<size_t>(s)]; ++i) {
        const double got = dtype == DType::kBF16 ? FromBFloat16(t.data<BFloat16>()[off[s] + i])
                                                 : t.data<double>()[off[s] + i];
        const double want = dtype == DType::kBF16
                                ? FromBFloat16(ToBFloat16(static_cast<float>(Owned(s, i))))
                                : Owned(s, i);
        ASSERT_EQ(got, want) << "rank " << r << ": element " << i << " of rank " << s << "'s range";
      }
    }
  });
}

TEST(GlooAllGather, EqualCounts) { CheckAllGather({13, 13, 13, 13}, DType::kF64); }
TEST(GlooAllGather, UnequalAndZeroCountsBf16MovesAsBytes) {
  CheckAllGather({4, 0, 9}, DType::kBF16);
}
TEST(GlooAllGather, OnlyTheLastRankHasData) { CheckAllGather({0, 0, 7}, DType::kF64); }

// A ZeRO-1 step: reduce-scatter the gradients, each rank averages its shard, all-gather; every rank
// ends with the mean of all ranks' gradients. Runs twice on one group (the ops' messages stay
// apart).
TEST(GlooZero, ReduceScatterUpdateAllGatherTwice) {
  const std::vector<int64_t> counts = {10, 3, 0, 8};
  const std::vector<int64_t> off = Offsets(counts);
  const int n = 4;
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    for (int round = 0; round < 2; ++round) {
      Tensor g = Tensor::Empty({off.back()}, DType::kF64);
      for (int64_t i = 0; i < off.back(); ++i)
        g.data<double>()[i] = (r + 1) * (round + 1) * static_cast<double>(i);
      ASSERT_TRUE(comm.ReduceScatterSum(g, counts).ok());
      for (int64_t i = off[r]; i < off[r + 1]; ++i) g.data<double>()[i] /= n;
      for (int64_t i = 0; i < off.back(); ++i) {
        if (i < off[r] || i >= off[r + 1]) g.data<double>()[i] = std::nan("");
      }
      ASSERT_TRUE(comm.AllGather(g, counts).ok());
      for (int64_t i = 0; i < off.back(); ++i) {
        ASSERT_EQ(g.data<double>()[i], 2.5 * (round + 1) * static_cast<double>(i))
            << "rank " << r << " round " << round;
      }
    }
  });
}

Tensor Filled(int64_t n, double base) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = static_cast<float>(base + static_cast<double>(i));
  return t;
}

TEST(GlooExchange, RingSendToNextReceiveFromPrevInOneBatch) {
  const int n = 4;
  RunGlooGroup(n, [&](int r, Communicator& comm) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    Tensor out = Filled(3 + r, 100.0 * r), in = Tensor::Empty({3 + prev}, DType::kF32);
    Poison(in);
    // Half the ranks post the receive first: the order within a batch must not matter.
    std::vector<P2POp> ops = {{P2POp::kSend, out, next}, {P2POp::kRecv, in, prev}};
    if (r % 2) std::swap(ops[0], ops[1]);
    Status st = comm.Exchange(ops);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(in.ToVector<float>(), Filled(3 + prev, 100.0 * prev).ToVector<float>())
        << "rank " << r;
  });
}

// Two ranks exchange several messages each way, of several sizes (one empty) and dtypes, over two
// batches: the k-th message from one to the other lands in the k-th receive, in posting order.
TEST(GlooExchange, APairExchangesSeveralMessagesBothWaysInPostingOrder) {
  RunGlooGroup(2, [&](int r, Communicator& comm) {
    const int peer = 1 - r;
    for (int batch = 0; batch < 2; ++batch) {
      const double mine = 1000.0 * r + 100.0 * batch, theirs = 1000.0 * peer + 100.0 * batch;
      std::vector<Tensor> in = {Tensor::Empty({5}, DType::kF32), Tensor::Empty({0}, DType::kF32),
                                Tensor::Empty({7}, DType::kF32)};
      Tensor ids = Tensor::FromVector<int64_t>({r, batch, -1}, {3}),
             got_ids = Tensor::Empty({3}, DType::kI64);
      for (const Tensor& t : in) Poison(t);
      std::vector<P2POp> ops;
      // Rank 0 posts its receives first, rank 1 its sends: both orders meet.
      auto sends = [&] {
        ops.push_back({P2POp::kSend, Filled(5, mine), peer});
        ops.push_back({P2POp::kSend, Filled(0, mine), peer});
        ops.push_back({P2POp::kSend, ids, peer});
        ops.push_back({P2POp::kSend, Filled(7, mine + 10), peer});
      };
      auto recvs = [&] {
        ops.push_back({P2POp::kRecv, in[0], peer});
        ops.push_back({P2POp::kRecv, in[1], peer});
        ops.push_back({P2POp::kRecv, got_ids, peer});
        ops.push_back({P2POp::kRecv, in[2], peer});
      };
      if (r == 0) {
        recvs();
        sends();
      } else {
        sends();
        recvs();
      }
      Status st = comm.Exchange(ops);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(in[0].ToVector<float>(), Filled(5, theirs).ToVector<float>())
          << "rank " << r << " batch " << batch;
      EXPECT_EQ(got_ids.ToVector<int64_t>(), (std::vector<int64_t>{peer, batch, -1}));
      EXPECT_EQ(in[2].ToVector<float>(), Filled(7, theirs + 10).ToVector<float>())
          << "rank " << r << " batch " << batch;
    }
  });
}

TEST(GlooExchange, SendsToItselfPairWithItsReceivesInTheBatch) {
  RunGlooGroup(2, [&](int r, Communicator& comm) {
    Tensor a = Filled(4, 10.0 * r), b = Filled(2, 7.0), got_a = Tensor::Empty({4}, DType::kF32),
           got_b = Tensor::Empty({2}, DType::kF32), from_peer = Tensor::Empty({4}, DType::kF32);
    Status st = comm.Exchange({{P2POp::kSend, a, r},
                               {P2POp::kRecv, from_peer, 1 - r},
                               {P2POp::kSend, b, r},
                               {P2POp::kRecv, got_a, r},
                               {P2POp::kSend, a, 1 - r},
                               {P2POp::kRecv, got_b, r}});
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(got_a.ToVector<float>(), a.ToVector<float>());
    EXPECT_EQ(got_b.ToVector<float>(), b.ToVector<float>());
    EXPECT_EQ(from_peer.ToVector<float>(), Filled(4, 10.0 * (1 - r)).ToVector<float>());
  });
}

TEST(GlooExchange, APeerThatNeverAnswersTimesOutNamingTheOpAndPeer) {
  moe::testing::RunAgainstHungPeer([](Communicator& comm) {
    comm.SetPhase("step 3: pipeline stage 0 forward");
    Tensor in = Tensor::Empty({16}, DType::kF32), out = Filled(16, 0);
    Status st = comm.Exchange({{P2POp::kRecv, in, 1}, {P2POp::kSend, out, 1}});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
    EXPECT_NE(st.message().find(
                  "step 3: pipeline stage 0 forward: exchange: recv of 64 bytes from rank 1"),
              std::string::npos)
        << st;
    EXPECT_NE(st.message().find("over gloo (rank 0 of a group of 2)"), std::string::npos) << st;
    EXPECT_EQ(comm.Exchange({{P2POp::kSend, out, 1}}).code(), StatusCode::kUnavailable)
        << "the group stays failed";
  });
}

TEST(GlooCollectives, BadArgumentsAreRefusedAndLeaveTheGroupUsable) {
  RunGlooGroup(2, [&](int r, Communicator& comm) {
    Tensor t = Filled(6, r);
    EXPECT_EQ(comm.ReduceScatterSum(t, {6}).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.Exchange({{P2POp::kSend, t, 2}}).code(), StatusCode::kInvalidArgument);
    Status st = comm.ReduceScatterSum(t, {2, 4});
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> sum = {1, 3, 5, 7, 9, 11};  // 0..5 + 1..6
    for (int64_t i = r == 0 ? 0 : 2; i < (r == 0 ? 2 : 6); ++i)
      EXPECT_EQ(t.data<float>()[i], sum[static_cast<size_t>(i)]);
  });
}

// The checks are shared by every backend; the LocalCommunicator runs them without threads.
TEST(CollectiveArguments, CountsDTypeAndPeersAreCheckedWithClearErrors) {
  LocalCommunicator local;
  local.SetPhase("step 9: optimizer");
  Tensor t = Tensor::Zeros({5}, DType::kF32);
  auto expect = [](const Status& st, const std::string& words) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(words), std::string::npos) << st;
  };
  expect(local.ReduceScatterSum(t, {2, 3}), "counts has 2 entries for a group of 1 ranks");
  expect(local.ReduceScatterSum(t, {4}), "counts sum to 4 elements but the tensor [5] has 5");
  expect(local.AllGather(t, {-1}), "counts[0] is negative (-1)");
  expect(local.ReduceScatterSum(Tensor::Zeros({5}, DType::kBF16), {5}), "sums f32 or f64 tensors");
  expect(local.ReduceScatterSum(Tensor(), {0}), "step 9: optimizer: reduce_scatter over local");
  expect(local.Exchange({{P2POp::kSend, t, 1}}),
         "op 0 (send): peer 1 is not a rank of a group of 1");
  expect(local.Exchange({{P2POp::kSend, t, 0}}), "1 sends to this rank itself but 0 receives");
  expect(local.Exchange({{P2POp::kSend, t, 0}, {P2POp::kRecv, Tensor::Zeros({4}, DType::kF32), 0}}),
         "send 0 to itself is f32[5] but its receive is f32[4]");
  expect(local.Exchange({{P2POp::kRecv, Tensor(), 0}}), "op 0 (recv): the tensor is undefined");
  EXPECT_TRUE(local.ReduceScatterSum(t, {5}).ok());
  EXPECT_TRUE(local.AllGather(Tensor::Zeros({3}, DType::kBF16), {3}).ok());
}

TEST(LocalExchange, ASendToItselfLandsInItsReceive) {
  LocalCommunicator local;
  Tensor a = Filled(3, 1), b = Filled(2, 9), ga = Tensor::Empty({3}, DType::kF32),
         gb = Tensor::Empty({2}, DType::kF32);
  ASSERT_TRUE(local
                  .Exchange({{P2POp::kRecv, ga, 0},
                             {P2POp::kSend, a, 0},
                             {P2POp::kSend, b, 0},
                             {P2POp::kRecv, gb, 0}})
                  .ok());
  EXPECT_EQ(ga.ToVector<float>(), a.ToVector<float>());
  EXPECT_EQ(gb.ToVector<float>(), b.ToVector<float>());
}

// ---- Started collectives (Communicator::Start*): in flight while the caller computes ----

TEST(GlooStarted, AStartedAllReduceIsInFlightBeforeThePeerEvenJoins) {
  // Rank 1 joins only once rank 0's start has returned: a start that waited for the collective
  // would not return until Gloo's timeout, and the sum would fail.
  std::atomic<bool> started{false};
  RunGlooGroup(
      2,
      [&](int r, Communicator& comm) {
        Tensor t = Filled(8, r + 1);
        if (r == 0) {
          Pending op = comm.StartAllReduceSum(t);
          started = true;
          const Status st = op->Wait();
          ASSERT_TRUE(st.ok()) << st;
        } else {
          while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          const Status st = comm.AllReduceSum(t);
          ASSERT_TRUE(st.ok()) << st;
        }
        for (int64_t i = 0; i < 8; ++i)
          EXPECT_EQ(t.data<float>()[i], static_cast<float>(3 + 2 * i)) << "rank " << r;
      },
      /*timeout=*/5);
}

TEST(GlooStarted, StartedAndCalledOperationsRunInCallOrder) {
  // A reduce-scatter and an all-to-all started, a host sum and an all-gather called in between and
  // after: each result is what the same calls made one by one give.
  RunGlooGroup(3, [&](int r, Communicator& comm) {
    Tensor rs = Input(r, 12, DType::kF64);
    Pending a = comm.StartReduceScatterSum(rs, {4, 4, 4});
    double host = r + 1;
    const Status sum = comm.AllReduceSumHost(&host, 1);  // queued behind the reduce-scatter
    ASSERT_TRUE(sum.ok()) << sum;
    EXPECT_EQ(host, 6.0);
    // All-to-all-v: rank r sends rank p (r + p) rows of 2, each row's values naming (source, dest).
    std::vector<int64_t> send_rows, recv_rows;
    for (int p = 0; p < 3; ++p) {
      send_rows.push_back(r + p);
      recv_rows.push_back(p + r);
    }
    Tensor send = Tensor::Empty({3 * r + 3, 2}, DType::kF32),
           recv = Tensor::Empty({3 * r + 3, 2}, DType::kF32);
    for (int p = 0, row = 0; p < 3; ++p) {
      for (int i = 0; i < r + p; ++i, ++row) {
        send.data<float>()[2 * row] = static_cast<float>(10 * r + p);
        send.data<float>()[2 * row + 1] = static_cast<float>(i);
      }
    }
    Pending b = comm.StartAllToAllV(send, send_rows, recv, recv_rows);
    Tensor gathered = Filled(6, 0);
    for (int64_t i = 2 * r; i < 2 * r + 2; ++i)
      gathered.data<float>()[i] = static_cast<float>(100 + i);
    ASSERT_TRUE(comm.AllGather(gathered, {2, 2, 2}).ok());
    ASSERT_TRUE(a->Wait().ok());
    ASSERT_TRUE(b->Wait().ok());
    for (int64_t i = 0; i < 6; ++i)
      EXPECT_EQ(gathered.data<float>()[i], static_cast<float>(100 + i));
    for (int64_t i = 4 * r; i < 4 * r + 4; ++i) {
      double want = 0;
      for (int s = 0; s < 3; ++s)
        want = s == 0 ? Input(s, 12, DType::kF64).data<double>()[i]
                      : want + Input(s, 12, DType::kF64).data<double>()[i];
      EXPECT_EQ(rs.data<double>()[i], want) << "rank " << r << " element " << i;
    }
    for (int p = 0, row = 0; p < 3; ++p) {
      for (int i = 0; i < p + r; ++i, ++row) {
        EXPECT_EQ(recv.data<float>()[2 * row], static_cast<float>(10 * p + r))
            << "rank " << r << " row " << row;
        EXPECT_EQ(recv.data<float>()[2 * row + 1], static_cast<float>(i))
            << "rank " << r << " row " << row;
      }
    }
  });
}

TEST(GlooStarted, DroppingAStartedCollectiveWaitsForIt) {
  RunGlooGroup(2, [&](int r, Communicator& comm) {
    Tensor t = Filled(4, 10 * r);
    comm.StartAllReduceSum(t).reset();  // no Wait: the destructor waits, so t is final here
    for (int64_t i = 0; i < 4; ++i)
      EXPECT_EQ(t.data<float>()[i], static_cast<float>(10 + 2 * i)) << "rank " << r;
  });
}

TEST(GlooStarted, BadArgumentsFailAtTheWaitAndLeaveTheGroupUsable) {
  RunGlooGroup(2, [&](int r, Communicator& comm) {
    Tensor t = Filled(6, r);
    EXPECT_EQ(comm.StartReduceScatterSum(t, {6})->Wait().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.StartAllReduceSum(Tensor::Zeros({2}, DType::kI64))->Wait().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.StartAllToAllV(t.Reshape({6, 1}), {6}, t.Reshape({6, 1}), {6})->Wait().code(),
              StatusCode::kInvalidArgument);
    const Status st = comm.StartReduceScatterSum(t, {2, 4})->Wait();
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<float> sum = {1, 3, 5, 7, 9, 11};
    for (int64_t i = r == 0 ? 0 : 2; i < (r == 0 ? 2 : 6); ++i)
      EXPECT_EQ(t.data<float>()[i], sum[static_cast<size_t>(i)]);
  });
}

TEST(GlooStarted, AHungPeerFailsTheWaitNamingThePhaseAtTheStart) {
  moe::testing::RunAgainstHungPeer([](Communicator& comm) {
    comm.SetPhase("step 5: gradient bucket 2 of 3");
    Tensor t = Filled(16, 1);
    Pending op = comm.StartReduceScatterSum(t, {8, 8});
    comm.SetPhase("step 5: layer 3 backward");  // the caller goes on meanwhile
    const Status st = op->Wait();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st;
    EXPECT_NE(
        st.message().find(
            "step 5: gradient bucket 2 of 3: reduce_scatter over gloo (rank 0 of a group of 2)"),
        std::string::npos)
        << st;
    EXPECT_EQ(comm.StartAllReduceSum(t)->Wait().code(), StatusCode::kUnavailable)
        << "the group stays failed";
  });
}

}  // namespace
}  // namespace moe::parallel
