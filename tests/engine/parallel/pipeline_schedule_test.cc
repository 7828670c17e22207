// The pipeline schedules, checked by simulating every rank of a pipeline: each exchange is a
// batched rendezvous (an item completes when the peer has posted the matching item, as an NCCL
// group send/recv does), computes wait for their inputs. For every shape it must finish without
// deadlock, every send must meet the receive of the same tensor, each chunk must run every
// micro-batch forward and backward once, in order, with its inputs present, and 1F1B must hold at
// most PP - r micro-batches. With unit forward and 2-unit backward times the simulated bubble must
// equal (PP - 1) / (m + PP - 1) for 1F1B and come out below it, near (PP - 1) / (V m + PP - 1),
// when interleaved.
#include "worker/engine/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace moe::parallel {
namespace {

struct Item {
  enum Dir { kSendNext, kRecvPrev, kSendPrev, kRecvNext } dir;
  int peer;   // the rank at the other end
  int stage;  // the virtual stage of the tensor at the receiving end (forward) or its producer
  int64_t mb;
  bool done = false;
};

struct RankState {
  std::vector<PipelineOp> ops;
  size_t pc = 0;
  double clock = 0;
  bool in_exchange = false;
  double arrived = 0;
  std::vector<Item> items;
  std::set<std::pair<int, int64_t>> inputs, grads, forwarded, backwarded;  // (chunk, mb)
  int64_t in_flight = 0, peak_in_flight = 0;
};

class Simulator {
 public:
  Simulator(const PipelineShape& s, double tf, double tb)
      : s_(s), tf_(tf / s.virtual_pipeline), tb_(tb / s.virtual_pipeline) {
    for (int r = 0; r < s.pipeline_parallel; ++r) {
      RankState st;
      st.ops = BuildPipelineSchedule(s, r);
      ranks_.push_back(std::move(st));
    }
  }

  // Runs to the end; returns "" or what went wrong.
  std::string Run() {
    for (int guard = 0; guard < 1000000; ++guard) {
      bool all_done = true, progress = false;
      for (int r = 0; r < P(); ++r) {
        if (ranks_[r].pc >= ranks_[r].ops.size()) continue;
        all_done = false;
        std::string err;
        progress |= StepRank(r, &err);
        if (!err.empty()) return "rank " + std::to_string(r) + ": " + err;
      }
      if (all_done) return Finish();
      if (!progress) return Deadlock();
    }
    return "no end";
  }

  double Makespan() const {
    double t = 0;
    for (const auto& r : ranks_) t = std::max(t, r.clock);
    return t;
  }
  int64_t PeakInFlight(int r) const { return ranks_[r].peak_in_flight; }

 private:
  int P() const { return s_.pipeline_parallel; }
  int V() const { return s_.virtual_pipeline; }
  int Stage(int r, int chunk) const { return chunk * P() + r; }

  bool StepRank(int r, std::string* err) {
    RankState& st = ranks_[r];
    const PipelineOp& op = st.ops[st.pc];
    if (op.kind != PipelineOp::Kind::kExchange) {
      *err = Compute(r, op);
      ++st.pc;
      return true;
    }
    if (!st.in_exchange) {
      Post(r, op);
      return true;
    }
    bool progress = Match(r);
    if (std::all_of(st.items.begin(), st.items.end(), [](const Item& i) { return i.done; })) {
      st.in_exchange = false;
      st.items.clear();
      ++st.pc;
      progress = true;
    }
    return progress;
  }

  std::string Compute(int r, const PipelineOp& op) {
    RankState& st = ranks_[r];
    const auto key = std::make_pair(op.compute.chunk, op.compute.micro_batch);
    const int stage = Stage(r, op.compute.chunk);
    const int last = P() * V() - 1;
    if (op.kind == PipelineOp::Kind::kForward) {
      if (stage > 0 && !st.inputs.count(key))
        return "forward " + OpString(op) + " without its input";
      if (!st.forwarded.insert(key).second) return "forward twice: " + OpString(op);
      if (op.compute.micro_batch != Count(st.forwarded, key.first) - 1) {
        return "forwards of a chunk out of micro-batch order at " + OpString(op);
      }
      st.clock += tf_;
      st.peak_in_flight = std::max(st.peak_in_flight, ++st.in_flight);
      return "";
    }
    if (!st.forwarded.count(key)) return "backward before forward: " + OpString(op);
    if (stage < last && !st.grads.count(key))
      return "backward " + OpString(op) + " without its output gradient";
    if (!st.backwarded.insert(key).second) return "backward twice: " + OpString(op);
    if (op.compute.micro_batch != Count(st.backwarded, key.first) - 1)
      return "backwards out of order at " + OpString(op);
    st.clock += tb_;
    --st.in_flight;
    return "";
  }

  static int64_t Count(const std::set<std::pair<int, int64_t>>& s, int chunk) {
    int64_t n = 0;
    for (const auto& k : s) n += k.first == chunk ? 1 : 0;
    return n;
  }

  void Post(int r, const PipelineOp& op) {
    RankState& st = ranks_[r];
    st.in_exchange = true;
    st.arrived = st.clock;
    const int next = (r + 1) % P(), prev = (r - 1 + P()) % P();
    if (op.send_next)
      st.items.push_back(
          {Item::kSendNext, next, Stage(r, op.send_next->chunk) + 1, op.send_next->micro_batch});
    if (op.recv_prev)
      st.items.push_back(
          {Item::kRecvPrev, prev, Stage(r, op.recv_prev->chunk), op.recv_prev->micro_batch});
    if (op.send_prev)
      st.items.push_back(
          {Item::kSendPrev, prev, Stage(r, op.send_prev->chunk) - 1, op.send_prev->micro_batch});
    if (op.recv_next)
      st.items.push_back(
          {Item::kRecvNext, next, Stage(r, op.recv_next->chunk), op.recv_next->micro_batch});
  }

  // Pairs this rank's open items with the peers' posted ones.
  bool Match(int r) {
    bool progress = false;
    RankState& st = ranks_[r];
    for (Item& it : st.items) {
      if (it.done) continue;
      RankState& peer = ranks_[it.peer];
      if (!peer.in_exchange) continue;
      const Item::Dir want = it.dir == Item::kSendNext   ? Item::kRecvPrev
                             : it.dir == Item::kRecvPrev ? Item::kSendNext
                             : it.dir == Item::kSendPrev ? Item::kRecvNext
                                                         : Item::kSendPrev;
      for (Item& other : peer.items) {
        if (other.done || other.dir != want || other.peer != r) continue;
        // The same tensor: the stage it is delivered to (forward) or the stage whose output it
        // differentiates (backward), and the same micro-batch. A mismatch is a schedule bug.
        if (other.stage != it.stage || other.mb != it.mb) {
          mismatch_ = "rank " + std::to_string(r) + " item for stage " + std::to_string(it.stage) +
                      " mb " + std::to_string(it.mb) + " met rank " + std::to_string(it.peer) +
                      "'s stage " + std::to_string(other.stage) + " mb " + std::to_string(other.mb);
          continue;
        }
        it.done = other.done = true;
        const double t = std::max(st.arrived, peer.arrived);
        st.clock = std::max(st.clock, t);
        peer.clock = std::max(peer.clock, t);
        Deliver(r, it);
        Deliver(it.peer, other);
        progress = true;
        break;
      }
    }
    return progress;
  }

  void Deliver(int r, const Item& it) {
    RankState& st = ranks_[r];
    if (it.dir == Item::kRecvPrev) st.inputs.insert({it.stage / P(), it.mb});
    if (it.dir == Item::kRecvNext) st.grads.insert({it.stage / P(), it.mb});
  }

  std::string Finish() const {
    if (!mismatch_.empty()) return mismatch_;
    for (int r = 0; r < P(); ++r) {
      const auto& st = ranks_[r];
      if (static_cast<int64_t>(st.forwarded.size()) != s_.micro_batches * V())
        return "rank " + std::to_string(r) + ": missing forwards";
      if (static_cast<int64_t>(st.backwarded.size()) != s_.micro_batches * V())
        return "rank " + std::to_string(r) + ": missing backwards";
    }
    return "";
  }

  std::string Deadlock() const {
    std::ostringstream os;
    os << "deadlock" << (mismatch_.empty() ? "" : " (" + mismatch_ + ")") << ":";
    for (int r = 0; r < P(); ++r) {
      const auto& st = ranks_[r];
      os << " rank " << r << " at op " << st.pc << " "
         << (st.pc < st.ops.size() ? OpString(st.ops[st.pc]) : "end") << ";";
    }
    return os.str();
  }

  PipelineShape s_;
  double tf_, tb_;
  std::vector<RankState> ranks_;
  std::string mismatch_;
};

std::string Name(const PipelineShape& s) {
  return "PP" + std::to_string(s.pipeline_parallel) + " VPP" + std::to_string(s.virtual_pipeline) +
         " m" + std::to_string(s.micro_batches);
}

TEST(PipelineSchedule, OneFOneBIsCompleteDeadlockFreeAndHasTheTextbookBubble) {
  for (int p = 1; p <= 6; ++p) {
    for (int64_t m = 1; m <= 12; ++m) {
      const PipelineShape s{p, 1, m};
      Simulator sim(s, 1.0, 2.0);
      ASSERT_EQ(sim.Run(), "") << Name(s);
      for (int r = 0; r < p; ++r)
        EXPECT_LE(sim.PeakInFlight(r), std::min<int64_t>(p - r, m)) << Name(s) << " rank " << r;
      const double ideal = 3.0 * static_cast<double>(m);
      const double bubble = 1.0 - ideal / sim.Makespan();
      EXPECT_NEAR(bubble, IdealBubbleFraction(s), 1e-12) << Name(s);
    }
  }
}

TEST(PipelineSchedule, InterleavedIsCompleteDeadlockFreeAndShrinksTheBubble) {
  for (int p = 2; p <= 5; ++p) {
    for (int v = 2; v <= 4; ++v) {
      for (int64_t m = p; m <= 4 * p; m += p) {
        const PipelineShape s{p, v, m};
        Simulator sim(s, 1.0, 2.0);
        ASSERT_EQ(sim.Run(), "") << Name(s);
        const double bubble = 1.0 - 3.0 * static_cast<double>(m) / sim.Makespan();
        const PipelineShape plain{p, 1, m};
        EXPECT_LT(bubble, IdealBubbleFraction(plain)) << Name(s) << ": no better than 1F1B";
        EXPECT_NEAR(bubble, IdealBubbleFraction(s), 0.5 * IdealBubbleFraction(s)) << Name(s);
      }
    }
  }
}

TEST(PipelineSchedule, OpsReadAsMegatrons) {
  // PP2, m = 3 on the first rank: one warm-up forward, two 1F1B pairs, one cool-down backward.
  std::string ops;
  for (const PipelineOp& op : BuildPipelineSchedule({2, 1, 3}, 0)) ops += OpString(op) + " ";
  EXPECT_EQ(ops,
            "F0.0 X[ >0.0 ] F0.1 X[ >0.1 >>0.0 ] B0.0 F0.2 X[ >0.2 >>0.1 ] B0.1 X[ >>0.2 ] B0.2 ");
  EXPECT_NEAR(IdealBubbleFraction({4, 1, 8}), 3.0 / 11.0, 1e-15);
  EXPECT_NEAR(IdealBubbleFraction({4, 2, 8}), 3.0 / 19.0, 1e-15);
}

}  // namespace
}  // namespace moe::parallel
