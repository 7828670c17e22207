// NCCL: the GPU communicator. Communicators are non-blocking (config.blocking = 0) and every
// operation is watched: while it runs, the host polls the stream and ncclCommGetAsyncError; past the
// job's timeout it calls ncclCommAbort, so a dead or hung peer fails this rank with a clear error
// instead of a wait forever. All-to-all-v is grouped ncclSend/ncclRecv.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "worker/engine/comm/process_group.h"

namespace moe {
namespace {

std::string CudaError(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int size, std::chrono::milliseconds timeout)
      : comm_(comm), stream_(stream), rank_(rank), size_(size), timeout_(timeout) {}
  ~NcclCommunicator() override {
    if (aborted_) return;
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Status AllReduceSum(const Tensor& t) override {
    if (!t.device().is_cuda()) return InvalidArgumentError("nccl reduces device tensors only");
    return Run("all_reduce", [&] {
      return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), NcclType(t.dtype()), ncclSum, comm_, stream_);
    });
  }

  Status AllReduceSumHost(double* data, int64_t n) override {
    const size_t bytes = sizeof(double) * static_cast<size_t>(n);
    MOE_RETURN_IF_ERROR(Stage(data, bytes));
    MOE_RETURN_IF_ERROR(Run("all_reduce", [&] {
      return ncclAllReduce(scratch_, scratch_, static_cast<size_t>(n), ncclFloat64, ncclSum, comm_, stream_);
    }));
    return Unstage(data, bytes);
  }

  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override {
    const size_t row = static_cast<size_t>(send.dim(1)) * DTypeSize(send.dtype());
    return Run("all_to_all_v", [&] {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      size_t so = 0, ro = 0;
      for (int p = 0; p < size_; ++p) {
        const size_t sb = static_cast<size_t>(send_rows[static_cast<size_t>(p)]) * row;
        const size_t rb = static_cast<size_t>(recv_rows[static_cast<size_t>(p)]) * row;
        if (sb > 0) ncclSend(static_cast<char*>(send.raw()) + so, sb, ncclUint8, p, comm_, stream_);
        if (rb > 0) ncclRecv(static_cast<char*>(recv.raw()) + ro, rb, ncclUint8, p, comm_, stream_);
        so += sb;
        ro += rb;
      }
      return ncclGroupEnd();
    });
  }

  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n) override {
    const size_t block = sizeof(int64_t) * static_cast<size_t>(n), bytes = block * static_cast<size_t>(size_);
    MOE_RETURN_IF_ERROR(Reserve(2 * bytes));
    if (cudaError_t e = cudaMemcpy(scratch_, send, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) return Cuda(e);
    char* out = static_cast<char*>(scratch_) + bytes;
    MOE_RETURN_IF_ERROR(Run("all_to_all", [&] {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      for (int p = 0; p < size_; ++p) {
        ncclSend(static_cast<char*>(scratch_) + block * static_cast<size_t>(p), block, ncclUint8, p, comm_, stream_);
        ncclRecv(out + block * static_cast<size_t>(p), block, ncclUint8, p, comm_, stream_);
      }
      return ncclGroupEnd();
    }));
    if (cudaError_t e = cudaMemcpy(recv, out, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }

  Status AllGatherHost(const void* send, void* recv, size_t bytes) override {
    MOE_RETURN_IF_ERROR(Reserve(bytes * static_cast<size_t>(size_ + 1)));
    char* out = static_cast<char*>(scratch_) + bytes;
    if (cudaError_t e = cudaMemcpy(scratch_, send, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) return Cuda(e);
    MOE_RETURN_IF_ERROR(Run("all_gather", [&] { return ncclAllGather(scratch_, out, bytes, ncclUint8, comm_, stream_); }));
    if (cudaError_t e = cudaMemcpy(recv, out, bytes * static_cast<size_t>(size_), cudaMemcpyDeviceToHost); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }

  Status BroadcastHost(void* data, size_t bytes, int root) override {
    MOE_RETURN_IF_ERROR(Stage(data, bytes));
    MOE_RETURN_IF_ERROR(Run("broadcast", [&] { return ncclBroadcast(scratch_, scratch_, bytes, ncclUint8, root, comm_, stream_); }));
    return Unstage(data, bytes);
  }

  Status Barrier() override {
    double one = 1;
    return AllReduceSumHost(&one, 1);
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
  Status Stage(const void* host, size_t bytes) {
    MOE_RETURN_IF_ERROR(Reserve(bytes));
    if (cudaError_t e = cudaMemcpy(scratch_, host, bytes, cudaMemcpyHostToDevice); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }
  Status Unstage(void* host, size_t bytes) {
    if (cudaError_t e = cudaMemcpy(host, scratch_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) return Cuda(e);
    return OkStatus();
  }

  // Issues the operation, then watches it until the stream is done, NCCL reports an error, or the
  // timeout passes (then the communicator is aborted).
  template <typename Fn>
  Status Run(const char* op, Fn&& issue) {
    if (aborted_) return UnavailableError(Where(op) + ": the communicator was aborted after an earlier failure");
    // Work queued on the default stream (the engine's kernels) must finish before NCCL reads it.
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return Cuda(e);
    ncclResult_t r = issue();
    if (r != ncclSuccess && r != ncclInProgress) return UnavailableError(Where(op) + ": " + ncclGetErrorString(r));
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return OkStatus();
      if (q != cudaErrorNotReady) return Cuda(q);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Abort();
        return UnavailableError(Where(op) + ": a peer failed: " + ncclGetErrorString(async));
      }
      if (std::chrono::steady_clock::now() - start > timeout_) {
        Abort();
        return DeadlineExceededError(Where(op) + ": timed out after " + std::to_string(timeout_.count() / 1000) +
                                     " s waiting for a peer (a rank hangs or died); the communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  void Abort() {
    aborted_ = true;
    ncclCommAbort(comm_);
  }
  std::string Where(const char* op) const {
    return (phase_.empty() ? std::string() : phase_ + ": ") + op + " over nccl (rank " + std::to_string(rank_) +
           " of a group of " + std::to_string(size_) + ")";
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
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
  for (size_t i = 0; i < n; ++i) static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(v(s[2 * i]) * 16 + v(s[2 * i + 1]));
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  if (cudaError_t e = cudaSetDevice(options.cuda_device); e != cudaSuccess) {
    return UnavailableError("cudaSetDevice(" + std::to_string(options.cuda_device) + "): " + CudaError(e));
  }
  // The unique id travels through the store: rank 0 makes it, the others wait for it.
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return UnavailableError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    MOE_RETURN_IF_ERROR(store->Set("nccl_unique_id", ToHex(&id, sizeof(id))));
  } else {
    MOE_RETURN_IF_ERROR(store->Wait({"nccl_unique_id"}, timeout));
    MOE_ASSIGN_OR_RETURN(std::string hex, store->Get("nccl_unique_id"));
    if (!FromHex(hex, &id, sizeof(id))) return DataLossError("rendezvous: malformed NCCL unique id");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const auto start = std::chrono::steady_clock::now();
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) { r = state; break; }
    if (std::chrono::steady_clock::now() - start > timeout) {
      ncclCommAbort(comm);
      return DeadlineExceededError("ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                   " timed out after " + std::to_string(timeout.count() / 1000) + " s (are all ranks up?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess && r != ncclInProgress) return UnavailableError(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
  cudaStream_t stream;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    ncclCommAbort(comm);
    return UnavailableError("cudaStreamCreate: " + CudaError(e));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, rank, size, timeout));
}

bool HaveNccl() { return true; }

}  // namespace moe
