// NCCL: the GPU communicator. Communicators are non-blocking (config.blocking = 0).
//
// Device collectives (all-reduce, all-to-all-v, reduce-scatter, all-gather, point to point) are
// ordered on the streams, not waited for by the host: the communicator's stream waits for the
// kernels queued so far (an event), NCCL puts the operation on it (the host waits only until the
// communicator leaves ncclInProgress: the operation is on the stream then), the buffers are
// recorded on that stream for the caching allocator, and the kernels' stream waits for the
// operation's end event, at once or, for a started one (Start*), when the caller asks (Wait) after
// queuing work that does not need it. A watchdog thread (CollectiveWatch) watches every such
// collective until its end event has passed: past the job's timeout (counted from its start event,
// so the rank's own queued compute does not count), on an asynchronous NCCL error or a device
// error, it ends the rank (OnCollectiveFailure), since the work queued behind a failed collective
// cannot be trusted. Communicators are aborted in one place (Watchdog::Abort), and one with work
// still queued is aborted rather than destroyed. Host-valued collectives (sums of host doubles, the
// counts' all-to-all, broadcasts) stage through a device scratch buffer and wait on the host with
// WaitForNccl (nccl_wait.h), which aborts the communicator past the timeout, so a dead or hung peer
// fails the call with a clear error. All-to-all-v and Exchange are grouped ncclSend/ncclRecv;
// reduce-scatter and all-gather of unequal ranges are grouped ncclReduce/ncclBroadcast (the NCCL
// collectives take one count for every rank).
//
// Several communicators at once (an expert all-to-all beside a gradient bucket's reduce-scatter):
// NCCL's user guide ("Using multiple NCCL communicators concurrently") requires every rank to issue
// their operations in the same order and the device to launch them in that order, or their kernels
// can deadlock. The engine issues every collective from its one training thread in program order,
// the same on every rank (tests/engine/collective_order_test records it over two ranks). The device
// order is LaunchOrder's (nccl_wait.h ChooseNcclLaunchOrder): NCCL_LAUNCH_ORDER_IMPLICIT=1 on NCCL
// 2.26 and later (NCCL then launches in host issue order across communicators), else one stream
// shared by all the process's communicators.
#include "worker/engine/parallel/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/runtime.h"
#include "worker/engine/parallel/collective_args.h"
#include "worker/engine/parallel/nccl_wait.h"

namespace moe::parallel {
namespace {

std::string CudaError(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

bool Issued(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// ncclCommGetAsyncError as a poll: pending while the communicator is ncclInProgress.
NcclPoll CommState(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) {
    return {NcclPoll::kFailed, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r)};
  }
  if (state == ncclSuccess) return {};
  if (state == ncclInProgress) return {NcclPoll::kPending, ""};
  return {NcclPoll::kFailed,
          std::string(ncclGetErrorString(state)) + " (" + ncclGetLastError(comm) + ")"};
}

// The real clock and the communicator's state; the caller adds the stream when there is one.
NcclWaitHooks CommHooks(ncclComm_t comm, std::function<void()> abort) {
  NcclWaitHooks hooks;
  hooks.comm_state = [comm] { return CommState(comm); };
  hooks.abort = std::move(abort);
  hooks.now = [] { return std::chrono::steady_clock::now(); };
  hooks.sleep = [](std::chrono::microseconds d) { std::this_thread::sleep_for(d); };
  return hooks;
}

// Makes calls between ncclGroupStart and ncclGroupEnd. calls(keep) passes each call's result to
// keep, which remembers the first failure; the group is closed whatever happened.
template <typename Fn>
ncclResult_t Grouped(Fn&& calls) {
  if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t first = ncclSuccess;
  calls([&first](ncclResult_t r) {
    if (Issued(first) && !Issued(r)) first = r;
  });
  const ncclResult_t end = ncclGroupEnd();
  return Issued(first) ? end : first;
}

bool AllEqual(const std::vector<int64_t>& counts) {
  for (int64_t c : counts) {
    if (c != counts[0]) return false;
  }
  return true;
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// The process's watchdog thread over stream-ordered collectives (one process drives one device),
// and the one place communicators are aborted: NCCL allows one thread at a time on a communicator,
// and an aborted one is freed, so it leaves the watch as it is aborted.
class Watchdog {
 public:
  static Watchdog& Get() {
    static Watchdog* w =
        new Watchdog();  // never destroyed: its thread may outlive static destructors
    return *w;
  }
  void Register(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.insert(comm);
  }
  void Unregister(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comms_.erase(comm);
    watch_.Forget(comm);
  }
  void Abort(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mu_);
    if (comms_.erase(comm) == 0) return;  // aborted already
    watch_.Forget(comm);
    ncclCommAbort(comm);
  }
  void Add(ncclComm_t comm, cudaEvent_t start, cudaEvent_t end, std::chrono::milliseconds timeout,
           std::string where) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!thread_.joinable()) {
        cudaGetDevice(&device_);
        thread_ = std::thread([this] { Loop(); });
      }
      watch_.Add(comm, start, end, timeout, std::move(where));
    }
    cv_.notify_one();
  }

 private:
  Watchdog() : watch_(Hooks()) {}
  static NcclPoll EventState(void* e) {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaSuccess) return {};
    if (r == cudaErrorNotReady) {
      cudaGetLastError();
      return {NcclPoll::kPending, ""};
    }
    return {NcclPoll::kFailed, CudaError(r)};
  }
  static CollectiveWatch::Hooks Hooks() {
    CollectiveWatch::Hooks h;
    h.event_state = &EventState;
    h.destroy_event = [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); };
    h.comm_state = [](void* c) { return CommState(static_cast<ncclComm_t>(c)); };
    h.now = [] { return std::chrono::steady_clock::now(); };
    return h;
  }
  // A failure ends the rank at once: the handler writes its final record and exits; the process's
  // end closes the communicators' connections (aborting them here could hang, or race the main
  // thread inside one).
  void Loop() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return watch_.watched() > 0; });
      const Status st = watch_.Poll();
      if (!st.ok()) OnCollectiveFailure(Status(st.code(), st.message() + "; the rank ends"));
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  CollectiveWatch watch_;
  std::set<ncclComm_t> comms_;
  int device_ = 0;
  std::thread thread_;
};

// The stream the kernels run on (kernels/cuda): collectives start after the work queued there and
// it waits for their end.
cudaStream_t KernelStream() { return static_cast<cudaStream_t>(kernels::KernelStream()); }

// The process's launch order across communicators (the file's comment), chosen once, before NCCL
// first reads its environment (the first communicator's ncclGetUniqueId or init); a value of
// NCCL_LAUNCH_ORDER_IMPLICIT the user set is kept.
NcclLaunchOrder LaunchOrder() {
  static const NcclLaunchOrder order = [] {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) version = 0;
    const NcclLaunchOrder o =
        ChooseNcclLaunchOrder(version, std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT"));
    if (o == NcclLaunchOrder::kImplicit) setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
    return o;
  }();
  return order;
}

// The stream every communicator shares under kSharedStream (never destroyed: the process's).
StatusOr<cudaStream_t> SharedCommStream() {
  static cudaStream_t stream = nullptr;
  static cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (error != cudaSuccess) return UnavailableError("cudaStreamCreate: " + CudaError(error));
  return stream;
}

// A started device collective: the kernels' stream waits for its end event at Wait (or when it is
// dropped, so that nothing reads its buffers early).
class NcclPending final : public PendingCollective {
 public:
  explicit NcclPending(cudaEvent_t end) : end_(end) {}
  ~NcclPending() override {
    if (end_ != nullptr) (void)Wait();
  }
  Status Wait() override {
    if (end_ == nullptr) return OkStatus();
    const cudaError_t e = cudaStreamWaitEvent(KernelStream(), end_, 0);
    cudaEventDestroy(end_);
    end_ = nullptr;
    if (e != cudaSuccess)
      return InternalError(std::string("cudaStreamWaitEvent after a collective: ") + CudaError(e));
    return OkStatus();
  }

 private:
  cudaEvent_t end_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, bool owns_stream, cudaEvent_t ready,
                   int rank, int size, std::chrono::milliseconds timeout)
      : comm_(comm),
        stream_(stream),
        owns_stream_(owns_stream),
        ready_(ready),
        rank_(rank),
        size_(size),
        timeout_(timeout) {
    Watchdog::Get().Register(comm_);
  }
  ~NcclCommunicator() override {
    // Work still on the stream (a collective after a failure elsewhere): ncclCommDestroy would wait
    // for it, perhaps forever; abort instead.
    if (!aborted_ && cudaStreamQuery(stream_) != cudaSuccess) {
      cudaGetLastError();
      Abort();
    }
    if (aborted_) return;
    Watchdog::Get().Unregister(comm_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(ready_);
    if (owns_stream_) cudaStreamDestroy(stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Status AllReduceSum(const Tensor& t) override {
    if (!t.device().is_cuda())
      return InvalidArgumentError(Where("all_reduce") + ": nccl reduces device tensors only");
    return Ordered("all_reduce", {t}, AllReduceOf(t));
  }
  Pending StartAllReduceSum(const Tensor& t) override {
    if (!t.device().is_cuda())
      return Finished(
          InvalidArgumentError(Where("all_reduce") + ": nccl reduces device tensors only"));
    return Started("all_reduce", {t}, AllReduceOf(t));
  }

  Status AllReduceSumHost(double* data, int64_t n) override {
    const size_t bytes = sizeof(double) * static_cast<size_t>(n);
    MOE_RETURN_IF_ERROR(Stage(data, bytes));
    MOE_RETURN_IF_ERROR(RunHost("all_reduce", [&] {
      return ncclAllReduce(scratch_, scratch_, static_cast<size_t>(n), ncclFloat64, ncclSum, comm_,
                           stream_);
    }));
    return Unstage(data, bytes);
  }

  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override {
    return Ordered("all_to_all_v", {send, recv}, AllToAllVOf(send, send_rows, recv, recv_rows));
  }
  Pending StartAllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                         const Tensor& recv, const std::vector<int64_t>& recv_rows) override {
    return Started("all_to_all_v", {send, recv}, AllToAllVOf(send, send_rows, recv, recv_rows));
  }

  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n) override {
    const size_t block = sizeof(int64_t) * static_cast<size_t>(n),
                 bytes = block * static_cast<size_t>(size_);
    MOE_RETURN_IF_ERROR(Reserve(2 * bytes));
    MOE_RETURN_IF_ERROR(CopyOnKernels(scratch_, send, bytes, cudaMemcpyHostToDevice));
    char* out = static_cast<char*>(scratch_) + bytes;
    MOE_RETURN_IF_ERROR(RunHost("all_to_all", [&] {
      return Grouped([&](auto keep) {
        for (int p = 0; p < size_; ++p) {
          keep(ncclSend(static_cast<char*>(scratch_) + block * static_cast<size_t>(p), block,
                        ncclUint8, p, comm_, stream_));
          keep(ncclRecv(out + block * static_cast<size_t>(p), block, ncclUint8, p, comm_, stream_));
        }
      });
    }));
    MOE_RETURN_IF_ERROR(CopyOnKernels(recv, out, bytes, cudaMemcpyDeviceToHost));
    return OkStatus();
  }

  Status AllGatherHost(const void* send, void* recv, size_t bytes) override {
    MOE_RETURN_IF_ERROR(Reserve(bytes * static_cast<size_t>(size_ + 1)));
    char* out = static_cast<char*>(scratch_) + bytes;
    MOE_RETURN_IF_ERROR(CopyOnKernels(scratch_, send, bytes, cudaMemcpyHostToDevice));
    MOE_RETURN_IF_ERROR(RunHost("all_gather", [&] {
      return ncclAllGather(scratch_, out, bytes, ncclUint8, comm_, stream_);
    }));
    MOE_RETURN_IF_ERROR(
        CopyOnKernels(recv, out, bytes * static_cast<size_t>(size_), cudaMemcpyDeviceToHost));
    return OkStatus();
  }

  Status BroadcastHost(void* data, size_t bytes, int root) override {
    MOE_RETURN_IF_ERROR(Stage(data, bytes));
    MOE_RETURN_IF_ERROR(RunHost("broadcast", [&] {
      return ncclBroadcast(scratch_, scratch_, bytes, ncclUint8, root, comm_, stream_);
    }));
    return Unstage(data, bytes);
  }

  Status Barrier() override {
    double one = 1;
    return AllReduceSumHost(&one, 1);
  }

  Status ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    MOE_RETURN_IF_ERROR(CheckReduceScatter(t, counts));
    if (t.numel() == 0) return OkStatus();  // the same on every rank: counts are
    return Ordered("reduce_scatter", {t}, ReduceScatterOf(t, counts));
  }
  Pending StartReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) override {
    if (Status st = CheckReduceScatter(t, counts); !st.ok() || t.numel() == 0) return Finished(st);
    return Started("reduce_scatter", {t}, ReduceScatterOf(t, counts));
  }

  Status AllGather(const Tensor& t, const std::vector<int64_t>& counts) override {
    const std::string where = Where("all_gather");
    MOE_RETURN_IF_ERROR(CheckDevice(t, /*want_cuda=*/true, where));
    MOE_RETURN_IF_ERROR(CheckRanges(t, counts, size_, where));
    if (t.numel() == 0) return OkStatus();
    char* base = static_cast<char*>(t.raw());
    const size_t elem = DTypeSize(t.dtype());
    if (AllEqual(counts)) {
      // In place: NCCL gathers in place when sendbuff = recvbuff + rank * sendcount. Bytes: any
      // dtype.
      const size_t bytes = static_cast<size_t>(counts[0]) * elem;
      return Ordered("all_gather", {t}, [&] {
        return ncclAllGather(base + static_cast<size_t>(rank_) * bytes, base, bytes, ncclUint8,
                             comm_, stream_);
      });
    }
    const std::vector<int64_t> off = RangeOffsets(counts);
    return Ordered("all_gather", {t}, [&] {
      return Grouped([&](auto keep) {
        for (int r = 0; r < size_; ++r) {
          const size_t ri = static_cast<size_t>(r), bytes = static_cast<size_t>(counts[ri]) * elem;
          char* range = base + static_cast<size_t>(off[ri]) * elem;
          if (bytes > 0) keep(ncclBroadcast(range, range, bytes, ncclUint8, r, comm_, stream_));
        }
      });
    });
  }

  Status Exchange(const std::vector<P2POp>& ops) override {
    const std::string where = Where("exchange");
    MOE_RETURN_IF_ERROR(CheckP2P(ops, rank_, size_, where));
    for (const P2POp& o : ops)
      MOE_RETURN_IF_ERROR(CheckDevice(o.tensor, /*want_cuda=*/true, where));
    // One group: which peer hangs cannot be told apart, so an error names the whole batch.
    std::vector<Tensor> buffers;
    for (const P2POp& o : ops) buffers.push_back(o.tensor);
    return Ordered("exchange (" + DescribeBatch(ops) + ")", buffers, [&] {
      return Grouped([&](auto keep) {
        for (const P2POp& o : ops) {
          const size_t bytes = o.tensor.nbytes();
          if (bytes == 0) continue;  // so does the other end: the sizes of a message match
          if (o.kind == P2POp::kSend) {
            keep(ncclSend(o.tensor.raw(), bytes, ncclUint8, o.peer, comm_, stream_));
          } else {
            keep(ncclRecv(o.tensor.raw(), bytes, ncclUint8, o.peer, comm_, stream_));
          }
        }
      });
    });
  }

 private:
  Status Cuda(cudaError_t e) const { return InternalError(Where("cuda") + ": " + CudaError(e)); }
  Status Reserve(size_t bytes) {
    if (bytes <= scratch_bytes_) return OkStatus();
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    if (cudaError_t e = cudaMalloc(&scratch_, bytes); e != cudaSuccess) return Cuda(e);
    scratch_bytes_ = bytes;
    return OkStatus();
  }
  // A staging copy on the kernels' stream (after the work queued there; a copy to the host waits
  // for it).
  Status CopyOnKernels(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) const {
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, KernelStream()); e != cudaSuccess)
      return Cuda(e);
    if (kind != cudaMemcpyDeviceToHost) return OkStatus();
    if (cudaError_t e = cudaStreamSynchronize(KernelStream()); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }
  Status Stage(const void* host, size_t bytes) {
    MOE_RETURN_IF_ERROR(Reserve(bytes));
    MOE_RETURN_IF_ERROR(CopyOnKernels(scratch_, host, bytes, cudaMemcpyHostToDevice));
    return OkStatus();
  }
  Status Unstage(void* host, size_t bytes) {
    MOE_RETURN_IF_ERROR(CopyOnKernels(host, scratch_, bytes, cudaMemcpyDeviceToHost));
    return OkStatus();
  }

  Status CheckReduceScatter(const Tensor& t, const std::vector<int64_t>& counts) const {
    const std::string where = Where("reduce_scatter");
    MOE_RETURN_IF_ERROR(CheckDevice(t, /*want_cuda=*/true, where));
    MOE_RETURN_IF_ERROR(CheckSumDType(t, where));
    return CheckRanges(t, counts, size_, where);
  }

  // The device collectives' NCCL calls (made at once by Issue; they hold their arguments anyway).
  std::function<ncclResult_t()> AllReduceOf(const Tensor& t) {
    return [this, t] {
      return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), NcclType(t.dtype()),
                           ncclSum, comm_, stream_);
    };
  }
  std::function<ncclResult_t()> AllToAllVOf(const Tensor& send,
                                            const std::vector<int64_t>& send_rows,
                                            const Tensor& recv,
                                            const std::vector<int64_t>& recv_rows) {
    return [this, send, send_rows, recv, recv_rows] {
      const size_t row = static_cast<size_t>(send.dim(1)) * DTypeSize(send.dtype());
      return Grouped([&](auto keep) {
        size_t so = 0, ro = 0;
        for (int p = 0; p < size_; ++p) {
          const size_t sb = static_cast<size_t>(send_rows[static_cast<size_t>(p)]) * row;
          const size_t rb = static_cast<size_t>(recv_rows[static_cast<size_t>(p)]) * row;
          if (sb > 0)
            keep(ncclSend(static_cast<char*>(send.raw()) + so, sb, ncclUint8, p, comm_, stream_));
          if (rb > 0)
            keep(ncclRecv(static_cast<char*>(recv.raw()) + ro, rb, ncclUint8, p, comm_, stream_));
          so += sb;
          ro += rb;
        }
      });
    };
  }
  std::function<ncclResult_t()> ReduceScatterOf(const Tensor& t,
                                                const std::vector<int64_t>& counts) {
    return [this, t, counts] {
      char* base = static_cast<char*>(t.raw());
      const size_t elem = DTypeSize(t.dtype());
      const ncclDataType_t type = NcclType(t.dtype());
      if (AllEqual(counts)) {
        // In place: NCCL reduces in place when recvbuff = sendbuff + rank * recvcount.
        const size_t c = static_cast<size_t>(counts[0]);
        return ncclReduceScatter(base, base + static_cast<size_t>(rank_) * c * elem, c, type,
                                 ncclSum, comm_, stream_);
      }
      const std::vector<int64_t> off = RangeOffsets(counts);
      return Grouped([&](auto keep) {
        for (int r = 0; r < size_; ++r) {
          const size_t ri = static_cast<size_t>(r);
          char* range = base + static_cast<size_t>(off[ri]) * elem;
          if (counts[ri] > 0)
            keep(ncclReduce(range, range, static_cast<size_t>(counts[ri]), type, ncclSum, r, comm_,
                            stream_));
        }
      });
    };
  }

  // NCCL refused the call. The peers may have issued theirs: this communicator cannot be trusted to
  // match them any more.
  Status Refused(const std::string& op, ncclResult_t r) {
    const std::string last = ncclGetLastError(comm_);
    Abort();
    return UnavailableError(Where(op) + ": " + ncclGetErrorString(r) + " (" + last +
                            "); the communicator was aborted");
  }
  // The communicator's stream waits for the kernels queued so far (NCCL reads what they write).
  Status AfterKernels() {
    if (cudaError_t e = cudaEventRecord(ready_, KernelStream()); e != cudaSuccess) return Cuda(e);
    if (cudaError_t e = cudaStreamWaitEvent(stream_, ready_, 0); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }
  Status RecordOnStream(cudaEvent_t* end) {
    if (cudaError_t e = cudaEventCreateWithFlags(end, cudaEventDisableTiming); e != cudaSuccess)
      return Cuda(e);
    if (cudaError_t e = cudaEventRecord(*end, stream_); e != cudaSuccess) {
      cudaEventDestroy(*end);
      return Cuda(e);
    }
    return OkStatus();
  }

  // A device collective, ordered on the streams (the file's comment): on return it is on the
  // communicator's stream behind the kernels queued so far, its buffers are recorded on that
  // stream, the watchdog watches it, and *end is the event the kernels' stream must wait for before
  // it reads the result. The host waits only for NCCL to issue it (ncclInProgress), never for the
  // device.
  template <typename Fn>
  Status Issue(const std::string& op, const std::vector<Tensor>& buffers, Fn&& issue,
               cudaEvent_t* end) {
    *end = nullptr;
    if (aborted_)
      return UnavailableError(Where(op) +
                              ": the communicator was aborted after an earlier failure");
    for (const Tensor& t : buffers) t.RecordStream(stream_);  // before anything can fail
    MOE_RETURN_IF_ERROR(AfterKernels());
    cudaEvent_t start = nullptr, watched = nullptr;
    MOE_RETURN_IF_ERROR(
        RecordOnStream(&start));  // the watch's timeout runs from here, not from the issue
    if (ncclResult_t r = issue(); !Issued(r)) {
      cudaEventDestroy(start);
      return Refused(op, r);
    }
    if (Status st = WaitForNccl(CommHooks(comm_, [this] { Abort(); }), timeout_, Where(op));
        !st.ok()) {
      cudaEventDestroy(start);
      return st;
    }
    if (Status st = RecordOnStream(&watched); !st.ok()) {
      cudaEventDestroy(start);
      return st;
    }
    Watchdog::Get().Add(comm_, start, watched, timeout_, Where(op));
    return RecordOnStream(end);
  }
  template <typename Fn>
  Status Ordered(const std::string& op, const std::vector<Tensor>& buffers, Fn&& issue) {
    cudaEvent_t end = nullptr;
    MOE_RETURN_IF_ERROR(Issue(op, buffers, issue, &end));
    return NcclPending(end).Wait();
  }
  template <typename Fn>
  Pending Started(const std::string& op, const std::vector<Tensor>& buffers, Fn&& issue) {
    cudaEvent_t end = nullptr;
    if (Status st = Issue(op, buffers, issue, &end); !st.ok()) return Finished(st);
    return std::make_unique<NcclPending>(end);
  }

  // A host-valued collective on the staging buffer: issued behind the kernels, then waited for on
  // the host (WaitForNccl: the communicator out of ncclInProgress, then its stream idle), an error,
  // or the timeout (then the communicator is aborted). Only then may the caller read the staging
  // buffer.
  template <typename Fn>
  Status RunHost(const std::string& op, Fn&& issue) {
    if (aborted_)
      return UnavailableError(Where(op) +
                              ": the communicator was aborted after an earlier failure");
    kernels::CountHostSync();
    MOE_RETURN_IF_ERROR(AfterKernels());
    if (ncclResult_t r = issue(); !Issued(r)) return Refused(op, r);
    NcclWaitHooks hooks = CommHooks(comm_, [this] { Abort(); });
    hooks.stream_state = [this]() -> NcclPoll {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return {};
      if (q == cudaErrorNotReady) return {NcclPoll::kPending, ""};
      return {NcclPoll::kFailed, CudaError(q)};
    };
    return WaitForNccl(hooks, timeout_, Where(op));
  }
  void Abort() {
    aborted_ = true;
    Watchdog::Get().Abort(comm_);
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  bool owns_stream_;   // false: the process's shared stream (NcclLaunchOrder::kSharedStream)
  cudaEvent_t ready_;  // re-recorded before each operation (AfterKernels)
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  bool aborted_ = false;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

std::string ToHex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

bool FromHex(const std::string& s, void* p, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(p)[i] =
        static_cast<unsigned char>(v(s[2 * i]) * 16 + v(s[2 * i + 1]));
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  const NcclLaunchOrder order = LaunchOrder();  // before NCCL reads its environment
  if (cudaError_t e = cudaSetDevice(options.cuda_device); e != cudaSuccess) {
    return UnavailableError("cudaSetDevice(" + std::to_string(options.cuda_device) +
                            "): " + CudaError(e));
  }
  // The unique id travels through the store: rank 0 makes it, the others wait for it.
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return UnavailableError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    MOE_RETURN_IF_ERROR(store->Set("nccl_unique_id", ToHex(&id, sizeof(id))));
  } else {
    MOE_RETURN_IF_ERROR(store->Wait({"nccl_unique_id"}, timeout));
    MOE_ASSIGN_OR_RETURN(std::string hex, store->Get("nccl_unique_id"));
    if (!FromHex(hex, &id, sizeof(id)))
      return DataLossError("rendezvous: malformed NCCL unique id");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm;
  const std::string where = "ncclCommInitRankConfig (rank " + std::to_string(rank) +
                            " of a group of " + std::to_string(size) + "; are all ranks up?)";
  if (ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config); !Issued(r)) {
    return UnavailableError(where + ": " + ncclGetErrorString(r));
  }
  // Creation has no stream: done when the communicator leaves ncclInProgress.
  MOE_RETURN_IF_ERROR(
      WaitForNccl(CommHooks(comm, [comm] { ncclCommAbort(comm); }), timeout, where));
  cudaStream_t stream = nullptr;
  const bool own = order == NcclLaunchOrder::kImplicit;
  if (own) {
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      ncclCommAbort(comm);
      return UnavailableError("cudaStreamCreate: " + CudaError(e));
    }
  } else {
    StatusOr<cudaStream_t> shared = SharedCommStream();
    if (!shared.ok()) {
      ncclCommAbort(comm);
      return shared.status();
    }
    stream = *shared;
  }
  cudaEvent_t ready;
  if (cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming); e != cudaSuccess) {
    ncclCommAbort(comm);
    if (own) cudaStreamDestroy(stream);
    return UnavailableError("cudaEventCreate: " + CudaError(e));
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, stream, own, ready, rank, size, timeout));
}

bool HaveNccl() { return true; }

std::string NcclVersion() {
  int v = 0;  // 2.28.3 = 22803 (NCCL 2.9 and later: major * 10000 + minor * 100 + patch)
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace moe::parallel
