// Gloo over TCP: the CPU communicator. Gloo reports a dead peer (its sockets close) or a hung one (the
// op's timeout) by throwing; every op here turns that into a Status that names the phase, the
// collective and the group, so no rank waits forever and the error says where it happened.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <map>
#include <mutex>

#include "worker/engine/comm/process_group.h"

namespace moe {
namespace {

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
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Status st = store_->Wait(keys, timeout);
    if (!st.ok()) throw std::runtime_error(st.message());
  }

 private:
  KvStore* store_;
  std::chrono::milliseconds timeout_;
};

std::shared_ptr<::gloo::transport::Device> SharedDevice(const std::string& hostname) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<::gloo::transport::Device>> devices;
  std::lock_guard<std::mutex> lock(mu);
  auto& d = devices[hostname];
  if (!d) {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    d = ::gloo::transport::tcp::CreateDevice(attr);
  }
  return d;
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<::gloo::Context> ctx, std::chrono::milliseconds timeout)
      : ctx_(std::move(ctx)), timeout_(timeout) {}
  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  std::string backend() const override { return "gloo"; }

  Status AllReduceSum(const Tensor& t) override {
    if (!t.device().is_cpu()) return InvalidArgumentError("gloo reduces host tensors only");
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kF64) {
      return InvalidArgumentError(std::string("gloo all-reduce sums f32 or f64 (gradients are kept in fp32), got ") +
                                  DTypeName(t.dtype()));
    }
    return Run("all_reduce", [&] {
      ::gloo::AllreduceOptions opts(ctx_);
      opts.setTimeout(timeout_);
      if (t.dtype() == DType::kF32) {
        opts.setOutput(t.data<float>(), static_cast<size_t>(t.numel()));
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<float>));
      } else {
        opts.setOutput(t.data<double>(), static_cast<size_t>(t.numel()));
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<double>));
      }
      ::gloo::allreduce(opts);
    });
  }

  Status AllReduceSumHost(double* data, int64_t n) override {
    return Run("all_reduce", [&] {
      ::gloo::AllreduceOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<double>));
      ::gloo::allreduce(opts);
    });
  }

  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                   const std::vector<int64_t>& recv_rows) override {
    if (static_cast<int>(send_rows.size()) != size() || static_cast<int>(recv_rows.size()) != size()) {
      return InvalidArgumentError("all_to_all_v: counts for " + std::to_string(send_rows.size()) + " ranks in a group of " +
                                  std::to_string(size()));
    }
    std::vector<int64_t> send_elems, recv_elems;
    for (int64_t r : send_rows) send_elems.push_back(r * send.dim(1));
    for (int64_t r : recv_rows) recv_elems.push_back(r * recv.dim(1));
    return Run("all_to_all_v", [&] {
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
    });
  }

  Status AllToAllHost(const int64_t* send, int64_t* recv, int64_t n_per_rank) override {
    return Run("all_to_all", [&] {
      ::gloo::AlltoallOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setInput(const_cast<int64_t*>(send), static_cast<size_t>(n_per_rank * size()));
      opts.setOutput(recv, static_cast<size_t>(n_per_rank * size()));
      ::gloo::alltoall(opts);
    });
  }

  Status AllGatherHost(const void* send, void* recv, size_t bytes) override {
    return Run("all_gather", [&] {
      ::gloo::AllgatherOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setInput(static_cast<char*>(const_cast<void*>(send)), bytes);
      opts.setOutput(static_cast<char*>(recv), bytes * static_cast<size_t>(size()));
      ::gloo::allgather(opts);
    });
  }

  Status BroadcastHost(void* data, size_t bytes, int root) override {
    return Run("broadcast", [&] {
      ::gloo::BroadcastOptions opts(ctx_);
      opts.setTimeout(timeout_);
      opts.setRoot(root);
      opts.setOutput(static_cast<char*>(data), bytes);
      ::gloo::broadcast(opts);
    });
  }

  Status Barrier() override {
    return Run("barrier", [&] {
      ::gloo::BarrierOptions opts(ctx_);
      opts.setTimeout(timeout_);
      ::gloo::barrier(opts);
    });
  }

 private:
  template <typename Fn>
  Status Run(const char* op, Fn&& fn) {
    if (broken_) return UnavailableError(Where(op) + ": the group is unusable after an earlier failure: " + first_error_);
    try {
      fn();
      return OkStatus();
    } catch (const std::exception& e) {
      broken_ = true;
      first_error_ = e.what();
      const std::string what = e.what();
      const bool timeout = what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
      const std::string msg = Where(op) + (timeout ? ": timed out after " + std::to_string(timeout_.count() / 1000) +
                                                         " s waiting for a peer (a rank hangs or died)"
                                                   : ": a peer failed (a rank died or closed its connection)") +
                              "; gloo: " + what;
      return timeout ? DeadlineExceededError(msg) : UnavailableError(msg);
    }
  }
  std::string Where(const char* op) const {
    return (phase_.empty() ? std::string() : phase_ + ": ") + op + " over gloo (rank " + std::to_string(rank()) +
           " of a group of " + std::to_string(size()) + ")";
  }

  std::shared_ptr<::gloo::Context> ctx_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
  std::string first_error_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
  try {
    GlooStore gs(store, timeout);
    auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(timeout);
    auto dev = SharedDevice(options.hostname);
    ctx->connectFullMesh(gs, dev);
    return std::unique_ptr<Communicator>(new GlooCommunicator(ctx, timeout));
  } catch (const std::exception& e) {
    return UnavailableError("gloo rendezvous of rank " + std::to_string(rank) + " in a group of " + std::to_string(size) +
                            " failed: " + e.what());
  }
}

bool HaveGloo() { return true; }

}  // namespace moe
