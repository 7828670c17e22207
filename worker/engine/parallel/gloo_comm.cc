// Gloo over TCP: the CPU communicator. Gloo reports a dead peer (its sockets close) or a hung one
// (the op's timeout) by throwing; every op here turns that into a Status that names the phase, the
// collective and the group, so no rank waits forever and the error says where it happened.
// Reduce-scatter and point to point run on Gloo's unbound buffers (the transport under its own
// collectives), with slots of their own (kReduceScatterSlot, kAllGatherSlot, P2PSlot). The f64
// all-reduce (deterministic training's gradient sums) is that reduce-scatter, summing in rank
// order, then a direct all-gather.
#include "worker/engine/parallel/gloo_comm.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "kernels/runtime.h"
#include "worker/engine/parallel/collective_args.h"

namespace moe::parallel {
namespace {

// Slots of our own operations: Gloo's collectives use prefixes 0x01-0x08 in the top byte
// (gloo/types.h); ours use 0x40 and up, so no message of one can match a receive of another.
constexpr uint64_t kReduceScatterSlot = uint64_t{0x40} << 56;
constexpr uint64_t kAllGatherSlot = uint64_t{0x42} << 56;
// The n-th message from one rank to another (a sequence per pair and direction) has slot
// P2PSlot(n), so messages match in posting order whatever else is in flight between the two.
uint64_t P2PSlot(uint64_t n) { return (uint64_t{0x41} << 56) | (n & ((uint64_t{1} << 56) - 1)); }

// Gloo's Store over ours. Gloo expects exceptions on failure.
class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(KvStore* store, std::chrono::milliseconds timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Status st = store_->Set(key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw std::runtime_error("rendezvous set " + key + ": " + st.message());
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    auto v = store_->Get(key);
    if (!v.ok()) throw std::runtime_error("rendezvous get " + key + ": " + v.status().message());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Status st = store_->Wait(keys, timeout);
    if (!st.ok()) throw std::runtime_error(st.message());
  }

 private:
  KvStore* store_;
  std::chrono::milliseconds timeout_;
};

// One TCP device (one listener) per thread that makes communicators: a process runs one rank from
// one thread, except tests that run several ranks as threads, where ranks sharing a listener made
// Gloo's full-mesh connect fail now and then ("connection closed by peer" at rendezvous).
std::shared_ptr<::gloo::transport::Device> SharedDevice(const std::string& hostname) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::thread::id>,
                  std::shared_ptr<::gloo::transport::Device>>
      devices;
  std::lock_guard<std::mutex> lock(mu);
  auto& d = devices[{hostname, std::this_thread::get_id()}];
  if (!d) {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    d = ::gloo::transport::tcp::CreateDevice(attr);
  }
  return d;
}

// The group's operations, one at a time in call order. A call runs on the caller's thread once the
// started operations before it are done; a started one runs on a thread of the queue's own, so the
// caller computes while it moves. One thread calls (a communicator has one user), so nothing is
// posted while a call runs.
class OpQueue {
 public:
  using Op = std::function<Status()>;
  ~OpQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();  // after the posted operations: their waiters hold futures
  }
  Status Call(const Op& op) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return tasks_.empty() && !running_; });
    lock.unlock();
    return op();
  }
  std::shared_future<Status> Post(Op op) {
    std::packaged_task<Status()> task(std::move(op));
    std::shared_future<Status> done = task.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
    return done;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      std::packaged_task<Status()> task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
      lock.unlock();
      task();
      lock.lock();
      running_ = false;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> tasks_;
  bool running_ = false, stop_ = false;
  std::thread thread_;
};

// A started Gloo operation: its tensors are kept until it has run.
class GlooPending final : public PendingCollective {
 public:
  GlooPending(std::shared_future<Status> done, std::vector<Tensor> keep)
      : done_(std::move(done)), keep_(std::move(keep)) {}
  ~GlooPending() override {
    if (done_.valid()) done_.wait();
  }
  Status Wait() override { return done_.get(); }

 private:
  std::shared_future<Status> done_;
  std::vector<Tensor> keep_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<::gloo::Context> ctx, std::chrono::milliseconds timeout)
      : ctx_(std::move(ctx)),
        timeout_(timeout),
        send_seq_(static_cast<size_t>(ctx_->size)),
        recv_seq_(static_cast<size_t>(ctx_->size)) {}
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string backend() const override { return "gloo"; }

  Status AllReduceSum(const Tensor& t) override {
    MOE_RETURN_IF_ERROR(CheckReducible(t));
    return Run("all_reduce", AllReduceOf(t));
  }
  Pending StartAllReduceSum(const Tensor& t) override {
    if (Status st = CheckReducible(t); !st.ok()) return Finished(st);
    return Post("all_reduce", AllReduceOf(t), {t});
  }

  Status AllReduceSumHost(double* data, int64_t n) override {
    return Run(
        "all_reduce",
        [&] {
          ::gloo::AllreduceOptions opts(ctx_);
          opts.setTimeout(timeout_);
          opts.setOutput(data, static_cast<size_t>(n));
          opts.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<double>));
          ::gloo::allreduce(opts);
        },
        /*host_wait=*/true);
  }

  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override {
    MOE_RETURN_IF_ERROR(CheckSplits(send_rows, recv_rows));
    return Run("all_to_all_v", AllToAllVOf(send, send_rows, recv, recv_rows));
  }
  Pending StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                         const Tensor& recv, const std::vector<int64_t>& recv_rows) override {
    if (Status st = CheckSplits(send_rows, recv_rows); !st.ok()) return Finished(st);
    return Post("all_to_all_v", AllToAllVOf(send, send_rows, recv, recv_rows), {send, recv});
  }

  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n_per_rank) override {
    return Run(
        "all_to_all",
        [&] {
          ::gloo::AlltoallOptions opts(ctx_);
          opts.setTimeout(timeout_);
          opts.setInput(const_cast<int64_t*>(send), static_cast<size_t>(n_per_rank * size()));
          opts.setOutput(recv, static_cast<size_t>(n_per_rank * size()));
          ::gloo::alltoall(opts);
        },
        /*host_wait=*/true);
  }

  Status AllGatherHost(const void* send, void* recv, size_t bytes) override {
    return Run(
        "all_gather",
        [&] {
          ::gloo::AllgatherOptions opts(ctx_);
          opts.setTimeout(timeout_);
          opts.setInput(static_cast<char*>(const_cast<void*>(send)), bytes);
          opts.setOutput(static_cast<char*>(recv), bytes * static_cast<size_t>(size()));
          ::gloo::allgather(opts);
        },
        /*host_wait=*/true);
  }

  Status BroadcastHost(void* data, size_t bytes, int root) override {
    return Run(
        "broadcast",
        [&] {
          ::gloo::BroadcastOptions opts(ctx_);
          opts.setTimeout(timeout_);
          opts.setRoot(root);
          opts.setOutput(static_cast<char*>(data), bytes);
          ::gloo::broadcast(opts);
        },
        /*host_wait=*/true);
  }

  Status Barrier() override {
    return Run(
        "barrier",
        [&] {
          ::gloo::BarrierOptions opts(ctx_);
          opts.setTimeout(timeout_);
          ::gloo::barrier(opts);
        },
        /*host_wait=*/true);
  }

  Status ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    MOE_RETURN_IF_ERROR(CheckReduceScatter(t, counts));
    return Run("reduce_scatter", ReduceScatterOf(t, counts));
  }
  Pending StartReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    if (Status st = CheckReduceScatter(t, counts); !st.ok()) return Finished(st);
    return Post("reduce_scatter", ReduceScatterOf(t, counts), {t});
  }

  Status AllGather(const Tensor& t, const std::vector<int64_t>& counts) override {
    const std::string where = Where("all_gather");
    MOE_RETURN_IF_ERROR(CheckDevice(t, /*want_cuda=*/false, where));
    MOE_RETURN_IF_ERROR(CheckRanges(t, counts, size(), where));
    if (t.numel() == 0) return OkStatus();  // the same on every rank: counts are
    std::vector<size_t> bytes;
    for (int64_t c : counts) bytes.push_back(static_cast<size_t>(c) * DTypeSize(t.dtype()));
    return Run("all_gather", [&] {
      // In place (no input): this rank's range is already in t. Gloo's ring takes any counts, 0
      // too.
      ::gloo::AllgathervOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setOutput(static_cast<uint8_t*>(t.raw()), bytes);
      ::gloo::allgatherv(opts);
    });
  }

  Status Exchange(const std::vector<P2POp>& ops) override {
    std::string op = "exchange";
    MOE_RETURN_IF_ERROR(CheckP2P(ops, rank(), size(), Where(op)));
    for (const P2POp& o : ops)
      MOE_RETURN_IF_ERROR(CheckDevice(o.tensor, /*want_cuda=*/false, Where(op)));
    // Run reads `op` after a failure: it names the message being waited for, hence its peer.
    return Run(op, [&] {
      std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> posted(ops.size());
      for (size_t i = 0; i < ops.size(); ++i) {
        const P2POp& o = ops[i];
        if (o.peer == rank()) continue;
        posted[i] = ctx_->createUnboundBuffer(o.tensor.raw(), o.tensor.nbytes());
        const size_t p = static_cast<size_t>(o.peer);
        if (o.kind == P2POp::kSend) {
          posted[i]->send(o.peer, P2PSlot(send_seq_[p]++));
        } else {
          posted[i]->recv(o.peer, P2PSlot(recv_seq_[p]++));
        }
      }
      for (size_t i = 0; i < ops.size(); ++i) {
        if (!posted[i]) continue;
        op = "exchange: " + DescribeP2P(ops[i]) + " (op " + std::to_string(i) + " of " +
             std::to_string(ops.size()) + ")";
        if (ops[i].kind == P2POp::kSend) {
          posted[i]->waitSend(timeout_);
        } else {
          posted[i]->waitRecv(timeout_);
        }
      }
      ExchangeWithSelf(ops, rank());
    });
  }

 private:
  Status CheckReducible(const Tensor& t) const {
    if (!t.device().is_cpu())
      return InvalidArgumentError(Where("all_reduce") + ": gloo reduces host tensors only");
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kF64) {
      return InvalidArgumentError(Where("all_reduce") +
                                  ": gloo sums f32 or f64 (gradients are kept in fp32), got " +
                                  DTypeName(t.dtype()));
    }
    return OkStatus();
  }
  Status CheckSplits(const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows) const {
    if (static_cast<int>(send_rows.size()) == size() &&
        static_cast<int>(recv_rows.size()) == size())
      return OkStatus();
    return InvalidArgumentError(Where("all_to_all_v") + ": counts for " +
                                std::to_string(send_rows.size()) + " ranks in a group of " +
                                std::to_string(size()));
  }
  Status CheckReduceScatter(const Tensor& t, const std::vector<int64_t>& counts) const {
    const std::string where = Where("reduce_scatter");
    MOE_RETURN_IF_ERROR(CheckDevice(t, /*want_cuda=*/false, where));
    MOE_RETURN_IF_ERROR(CheckSumDType(t, where));
    return CheckRanges(t, counts, size(), where);
  }

  // The operations' Gloo calls, holding their arguments (they may run on the queue's thread).
  std::function<void()> AllReduceOf(const Tensor& t) {
    if (t.dtype() == DType::kF64) {  // in rank order, in two direct rounds
      return [this, t] {
        std::vector<int64_t> counts(static_cast<size_t>(size()));
        for (int r = 0; r < size(); ++r)
          counts[static_cast<size_t>(r)] = t.numel() * (r + 1) / size() - t.numel() * r / size();
        ReduceScatterDirect(t.data<double>(), counts);
        AllGatherDirect(t.data<double>(), counts);
      };
    }
    return [this, t] {
      ::gloo::AllreduceOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setOutput(t.data<float>(), static_cast<size_t>(t.numel()));
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<float>));
      ::gloo::allreduce(opts);
    };
  }
  std::function<void()> AllToAllVOf(const Tensor& send, const std::vector<int64_t>& send_rows,
                                    const Tensor& recv, const std::vector<int64_t>& recv_rows) {
    std::vector<int64_t> send_elems, recv_elems;
    for (int64_t r : send_rows) send_elems.push_back(r * send.dim(1));
    for (int64_t r : recv_rows) recv_elems.push_back(r * recv.dim(1));
    return [this, send, recv, send_elems, recv_elems] {
      ::gloo::AlltoallvOptions opts(ctx_);
      opts.setTimeout(timeout_);
      // Rows move as raw elements: bf16 travels as its 16-bit patterns.
      if (send.dtype() == DType::kF32) {
        opts.setInput(send.data<float>(), send_elems);
        opts.setOutput(recv.data<float>(), recv_elems);
      } else if (send.dtype() == DType::kBF16) {
        opts.setInput(static_cast<uint16_t*>(send.raw()), send_elems);
        opts.setOutput(static_cast<uint16_t*>(recv.raw()), recv_elems);
      } else {
        opts.setInput(send.data<double>(), send_elems);
        opts.setOutput(recv.data<double>(), recv_elems);
      }
      ::gloo::alltoallv(opts);
    };
  }
  std::function<void()> ReduceScatterOf(const Tensor& t, const std::vector<int64_t>& counts) {
    return [this, t, counts] {
      if (t.dtype() == DType::kF32) {
        ReduceScatterDirect(t.data<float>(), counts);
      } else {
        ReduceScatterDirect(t.data<double>(), counts);
      }
    };
  }

  // Every rank sends each peer that peer's range and sums the copies of its own range it receives,
  // in rank order (the same order every run). Each rank sends and receives (W - 1) / W of the
  // buffer, as in a ring, in one round instead of W - 1. The receives are posted before the sends,
  // into a block from the caching allocator (a fresh one page-faulted at every call: on this
  // virtual machine that was most of the time). Gloo's ReduceScatterHalvingDoubling does not fit:
  // it is of the older Algorithm API, whose buffers are bound to one pointer when the object is
  // built (so one object per call, registering 4 W (W - 1) slots each time and destroyed while its
  // last notification sends may still be queued), counts are int, and it leaves the result at the
  // front of the buffer.
  template <typename T>
  void ReduceScatterDirect(T* data, const std::vector<int64_t>& counts) {
    const int me = rank(), n = size();
    const std::vector<int64_t> off = RangeOffsets(counts);
    const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(me)]);
    if (off.back() == 0) return;
    // Peer s's copy of this rank's range: block s, or s - 1 after this rank's own.
    const Tensor inbox = Tensor::Empty({static_cast<int64_t>(std::max<size_t>(mine * (n - 1), 1))},
                                       std::is_same_v<T, float> ? DType::kF32 : DType::kF64);
    auto block = [&](int s) { return mine * static_cast<size_t>(s - (s > me ? 1 : 0)); };
    auto out = ctx_->createUnboundBuffer(data, sizeof(T) * static_cast<size_t>(off.back()));
    auto in = mine > 0 && n > 1 ? ctx_->createUnboundBuffer(inbox.raw(), sizeof(T) * mine * (n - 1))
                                : nullptr;
    int sends = 0, recvs = 0;
    for (int p = 0; p < n && in; ++p) {
      if (p == me) continue;
      in->recv(p, kReduceScatterSlot, sizeof(T) * block(p), sizeof(T) * mine);
      ++recvs;
    }
    for (int p = 0; p < n; ++p) {
      const size_t pi = static_cast<size_t>(p), theirs = static_cast<size_t>(counts[pi]);
      if (p == me || theirs == 0) continue;
      out->send(p, kReduceScatterSlot, sizeof(T) * static_cast<size_t>(off[pi]),
                sizeof(T) * theirs);
      ++sends;
    }
    for (; recvs > 0; --recvs) in->waitRecv(timeout_);
    for (; sends > 0; --sends) out->waitSend(timeout_);
    T* own = data + off[static_cast<size_t>(me)];
    const T* box = static_cast<const T*>(inbox.raw());
    SumInRankOrder(own, mine, me, n, [&](int s) { return box + block(s); });
  }

  // own[i] = copy_0[i] + copy_1[i] + ... in rank order, where copy_me is own itself: in blocks
  // that stay in L1, each a few vectorised passes.
  template <typename T, typename Copy>
  static void SumInRankOrder(T* own, size_t count, int me, int n, Copy&& copy) {
    constexpr size_t kBlock = 1024;
    T sum[kBlock];
    for (size_t b = 0; b < count; b += kBlock) {
      const size_t len = std::min(kBlock, count - b);
      const T* first = me == 0 ? own + b : copy(0) + b;
      std::copy(first, first + len, sum);
      for (int s = 1; s < n; ++s) {
        const T* x = s == me ? own + b : copy(s) + b;
        for (size_t i = 0; i < len; ++i) sum[i] += x[i];
      }
      std::copy(sum, sum + len, own + b);
    }
  }

  // Each rank's range of `data` to every other rank, received in place.
  template <typename T>
  void AllGatherDirect(T* data, const std::vector<int64_t>& counts) {
    const int me = rank(), n = size();
    const std::vector<int64_t> off = RangeOffsets(counts);
    if (off.back() == 0 || n == 1) return;
    auto buf = ctx_->createUnboundBuffer(data, sizeof(T) * static_cast<size_t>(off.back()));
    const size_t mine = static_cast<size_t>(counts[static_cast<size_t>(me)]);
    int sends = 0, recvs = 0;
    for (int p = 0; p < n; ++p) {
      const size_t pi = static_cast<size_t>(p);
      if (p == me || counts[pi] == 0) continue;
      buf->recv(p, kAllGatherSlot, sizeof(T) * static_cast<size_t>(off[pi]),
                sizeof(T) * static_cast<size_t>(counts[pi]));
      ++recvs;
    }
    for (int p = 0; p < n && mine > 0; ++p) {
      if (p == me) continue;
      buf->send(p, kAllGatherSlot, sizeof(T) * static_cast<size_t>(off[static_cast<size_t>(me)]),
                sizeof(T) * mine);
      ++sends;
    }
    for (; recvs > 0; --recvs) buf->waitRecv(timeout_);
    for (; sends > 0; --sends) buf->waitSend(timeout_);
  }

  // Runs fn (Gloo's calls) as the group's next operation on this thread. Gloo throws on a dead or
  // hung peer: the error names the operation by Where(op) at that moment (Exchange names the
  // message it waited for). The device-valued collectives stand in for NCCL's, which are ordered on
  // the stream; a host-valued one (host_wait) is a host synchronisation there and counts as one
  // here.
  template <typename Fn>
  Status Run(const std::string& op, Fn&& fn, bool host_wait = false) {
    if (host_wait) kernels::CountHostSync();
    return queue_.Call([&] { return Guarded([&] { return Where(op); }, fn); });
  }
  // Starts fn on the queue's thread: its error names the phase at the start.
  Pending Post(const std::string& op, std::function<void()> fn, std::vector<Tensor> keep) {
    std::shared_future<Status> done = queue_.Post([this, where = Where(op), fn = std::move(fn)] {
      return Guarded([&] { return where; }, fn);
    });
    return std::make_unique<GlooPending>(std::move(done), std::move(keep));
  }

  template <typename Describe, typename Fn>
  Status Guarded(Describe&& where, Fn&& fn) {
    if (broken_)
      return UnavailableError(where() +
                              ": the group is unusable after an earlier failure: " + first_error_);
    try {
      fn();
      return OkStatus();
    } catch (const std::exception& e) {
      broken_ = true;
      first_error_ = e.what();
      const std::string what = e.what();
      const bool timeout =
          what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
      const std::string msg =
          where() +
          (timeout ? ": timed out after " + std::to_string(timeout_.count() / 1000) +
                         " s waiting for a peer (a rank hangs or died)"
                   : ": a peer failed (a rank died or closed its connection)") +
          "; gloo: " + what;
      return timeout ? DeadlineExceededError(msg) : UnavailableError(msg);
    }
  }

  std::shared_ptr<::gloo::Context> ctx_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
  std::string first_error_;
  std::vector<uint64_t> send_seq_,
      recv_seq_;   // per peer: messages posted to it / from it (P2PSlot)
  OpQueue queue_;  // last: destroyed first, after the operations it runs
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  try {
    GlooStore gs(store, timeout);
    auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout);
    auto dev = SharedDevice(options.hostname);
    ctx->connectFullMesh(gs, dev);
    return std::unique_ptr<Communicator>(new GlooCommunicator(ctx, timeout));
  } catch (const std::exception& e) {
    return UnavailableError("gloo rendezvous of rank " + std::to_string(rank) + " in a group of " +
                            std::to_string(size) + " failed: " + e.what());
  }
}

bool HaveGloo() { return true; }

}  // namespace moe::parallel
