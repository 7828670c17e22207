// Serves the engine's UnixSocketStore protocol (common/kv_protocol.h) on a Unix socket and
// forwards every request to the controller's key-value store, under the attempt's key prefix. The
// rank's process thereby rendezvous through the controller without linking gRPC.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/grpc_client.h"
#include "common/status.h"
#include "moe/v1/worker_service.grpc.pb.h"

namespace moe::worker {

// The worker's session credential, shared by the agent (which learns it at registration) and its
// rendezvous proxies (which send it as `x-moe-session`). Any thread.
class SessionCredential {
 public:
  void Set(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    value_ = s;
  }
  std::string Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  std::string value_;
};

class RendezvousProxy {
 public:
  RendezvousProxy(std::shared_ptr<moe::v1::WorkerService::Stub> stub, ClientOptions client,
                  std::string socket_path, std::string prefix,
                  std::shared_ptr<SessionCredential> session);
  ~RendezvousProxy();
  Status Start();
  void Stop();
  const std::string& socket_path() const { return path_; }

 private:
  void Accept();
  void Serve(int fd);
  std::string Handle(const std::string& line);
  void Prepare(grpc::ClientContext* ctx, double deadline_seconds) const;

  std::shared_ptr<moe::v1::WorkerService::Stub> stub_;
  ClientOptions client_;
  std::string path_, prefix_;
  std::shared_ptr<SessionCredential> session_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;
  std::vector<int> fds_;
};

}  // namespace moe::worker
