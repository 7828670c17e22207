// Collective communication among the ranks of a job (or a sub-group of them).
//
// Implementations: LocalCommunicator (one rank; the embedded default), Gloo over TCP (CPU) and NCCL
// (GPU). Every call returns a Status: a peer that died or hangs turns into DEADLINE_EXCEEDED or
// UNAVAILABLE naming the collective and what the caller was doing (SetPhase), never a wait forever.
// Every rank of a group calls its collectives in the same order; one thread uses a communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/rank_layout.h"
#include "common/status.h"
#include "kernels/tensor.h"

namespace moe::parallel {

// One point-to-point message of a batch (Communicator::Exchange): send all of `tensor` to `peer`,
// or receive into all of it from `peer` (a rank of the communicator's group, the caller included).
struct P2POp {
  enum Kind { kSend, kRecv } kind;
  Tensor tensor;
  int peer;
};

// A collective in flight (Communicator::Start*): its tensors stay alive until it is waited for or
// destroyed. Wait makes the result usable by what the caller does next: on the CPU the host holds
// it; on CUDA the kernels' stream waits for it (the host does not). Destroying one without Wait
// waits for it and drops its status.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual Status Wait() = 0;
};
using Pending = std::unique_ptr<PendingCollective>;

// A pending collective that has already run (its status is Wait's answer).
Pending Finished(Status status);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // In-place elementwise sum over the group (floating tensors on this communicator's device).
  virtual Status AllReduceSum(const Tensor& t) = 0;
  // Sums host doubles over the group, in place (loss sums, token counts, timings).
  virtual Status AllReduceSumHost(double* data, int64_t n) = 0;
  // Row blocks of variable size: rows [offset_r, offset_r + send_rows[r]) of `send` go to rank r;
  // rank r's block lands at the matching place in `recv`, in rank order. Rows are dim(1) elements
  // wide.
  virtual Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                           const Tensor& recv, const std::vector<int64_t>& recv_rows) = 0;
  // Fixed-size exchange of host int64: block r of `send` (n_per_rank values) goes to rank r.
  virtual Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n_per_rank) = 0;
  // Gathers `bytes` from every rank into recv (size * bytes, rank order).
  virtual Status AllGatherHost(const void* send, void* recv, size_t bytes) = 0;
  virtual Status BroadcastHost(void* data, size_t bytes, int root) = 0;
  virtual Status Barrier() = 0;

  // ZeRO's halves of an all-reduce over a flat buffer t (f32 or f64, same numel on every rank) cut
  // in rank-order ranges: rank r owns [offset_r, offset_r + counts[r]) with offset_r = sum of
  // counts[< r]. counts has one entry per rank, the same on every rank, none negative (0 is
  // allowed), sum = numel. ReduceScatterSum: on return this rank's range holds the sum over the
  // group of that range; the rest of t is unspecified (it may be overwritten).
  virtual Status ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) = 0;
  // AllGather: this rank's range is valid on entry; on return all of t is valid on every rank. Any
  // dtype (the bytes move as they are).
  virtual Status AllGather(const Tensor& t, const std::vector<int64_t>& counts) = 0;
  // Point to point for pipeline schedules: posts every op of the batch, then completes them all, so
  // ranks that send to and receive from each other in one batch never deadlock. Messages between a
  // pair match in posting order (across batches too); a receive's tensor has the size of the
  // matching send. A send to oneself pairs with a receive from oneself in the same batch, in order.
  virtual Status Exchange(const std::vector<P2POp>& ops) = 0;

  // The same operations started: they are in flight when these return, so the caller computes while
  // they move (an all-to-all beside the shared expert, a gradient bucket's reduction beside the
  // rest of the backward). Operations still run in the order they are called, started or not: every
  // rank starts and calls them in the same order. A backend without asynchronous work runs them at
  // once. Never null: an error, found at the start (bad arguments, a failed group) or in flight, is
  // Wait's.
  virtual Pending StartAllReduceSum(const Tensor& t) { return Finished(AllReduceSum(t)); }
  virtual Pending StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                                 const Tensor& recv, const std::vector<int64_t>& recv_rows) {
    return Finished(AllToAllV(send, send_rows, recv, recv_rows));
  }
  virtual Pending StartReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) {
    return Finished(ReduceScatterSum(t, counts));
  }

  // What the caller is doing, for error messages: "step 12: moe layer 2 dispatch".
  void SetPhase(std::string phase) { phase_ = std::move(phase); }
  const std::string& phase() const { return phase_; }

 protected:
  // "<phase>: <op> over <backend> (rank r of a group of n)", the prefix of every error.
  std::string Where(const std::string& op) const;

  std::string phase_;
};

// Where this rank sits in the job's W = PP x DP x EP layout (EP divides DP), and its communicators.
// Megatron's rank order: EP innermost, then DP, then PP. Rank r is on pipeline stage pp = r / DP at
// data-parallel index dp = r % DP, member ep = dp % EP of its EP group (EP consecutive ranks). DP
// is the data-parallel size of a stage; the ranks of a stage with the same ep hold the same experts
// and form the expert-data-parallel group (DP / EP ranks).
struct ParallelContext {
  int world_size = 1;
  int rank = 0;
  int pipeline_parallel = 1;
  int expert_parallel = 1;
  Communicator* world = nullptr;  // all ranks: losses, token counts, timings
  Communicator* dp_group =
      nullptr;  // this stage's DP ranks (member dp_rank()): dense gradients, ZeRO shards
  Communicator* ep_group = nullptr;   // this rank's EP group (member ep_rank()): token all-to-all
  Communicator* expert_dp = nullptr;  // same stage, same experts (member expert_dp_rank()): expert
                                      // gradients and expert ZeRO shards
  Communicator* pipeline =
      nullptr;  // same dp_rank() on every stage, in stage order (member pp_rank()):
                // the schedule's sends and receives, the loss broadcast
  Communicator* embedding =
      nullptr;  // the first and last stage of this dp_rank() (member 0 and 1): the
                // embedding gradient shared by the input embedding and the MTP head.
                // A group of one when PP = 1; nullptr on the middle stages.

  int dp_size() const { return world_size / pipeline_parallel; }
  int pp_rank() const { return At().pp; }
  int dp_rank() const { return At().dp; }
  int ep_rank() const { return At().ep; }
  int ep_group_index() const { return rank / expert_parallel; }
  int expert_dp_size() const { return dp_size() / expert_parallel; }
  int expert_dp_rank() const { return dp_rank() / expert_parallel; }
  bool first_stage() const { return pp_rank() == 0; }
  bool last_stage() const { return pp_rank() == pipeline_parallel - 1; }
  RankCoordinates At() const {
    return RankLayout(rank, world_size, pipeline_parallel, expert_parallel);
  }
};

// How a rank's communicators are built (process_group.h, gloo_comm.h, nccl_comm.h).
struct GroupOptions {
  std::string backend = "gloo";        // gloo (CPU, TCP) | nccl (GPU) | local (W = 1)
  double timeout_seconds = 60;         // every collective, and the rendezvous itself
  std::string hostname = "127.0.0.1";  // the address other ranks reach this one at (gloo)
  int cuda_device = 0;                 // nccl
};

// What a rank does when a collective fails where no caller waits for it (NCCL's stream-ordered
// collectives, found by their watchdog thread): by default it prints the error and exits with
// kExitTransient (a restart may fix it); moe-train writes its final record first. The handler is
// called on the watchdog's thread and must not return (if it does, the process exits as above).
using CollectiveFailureHandler = void (*)(const Status& failure);
void SetCollectiveFailureHandler(CollectiveFailureHandler handler);
[[noreturn]] void OnCollectiveFailure(const Status& failure);

}  // namespace moe::parallel
