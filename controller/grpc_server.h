// The gRPC face of the controller: JobService and WorkerService on the callback API (a waiting RPC
// holds no thread), bearer-token roles, explicit message-size limits, the standard health service
// and reflection.
//
// Threads: gRPC's callback threads run the handlers and reactors; Start and Shutdown belong to
// main.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "controller/auth.h"
#include "controller/clock.h"
#include "controller/config.h"
#include "controller/controller.h"
#include "controller/executor.h"
#include "controller/rpc_times.h"
#include "prometheus/registry.h"

namespace moe::controller {

class UdpHeartbeats;
grpc::Status ToGrpc(const Status& st);
// The server's credentials from --tls-cert, --tls-key, --tls-client-ca (insecure without them).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const ServerOptions& o);

class GrpcServer {
 public:
  // `clock` times rendezvous waits: the same Clock the Controller's Tick expires them with.
  GrpcServer(Controller& controller, const TokenAuth& auth, Clock& clock);
  ~GrpcServer();
  Status Start(const ServerOptions& options);
  int port() const { return port_; }
  // The heartbeat counters (controller/udp_heartbeats.h) and the RPCs' times
  // (controller/rpc_times.h) in `registry`; before Start.
  void Count(prometheus::Registry& registry);
  void Shutdown();
  // Why BuildAndStart gave no listener: the port, or (with TLS) the certificate and key.
  static Status ListenError(const ServerOptions& options);

 private:
  void StartUdpHeartbeats(const std::string& listen);
  class JobServiceImpl;
  class WorkerServiceImpl;
  Controller& controller_;
  const TokenAuth& auth_;
  Clock& clock_;
  // The calls that may wait for the store run on these, not on gRPC's callback threads: the
  // clients' changes (submit, cancel, delete, drain) on one, the workers' messages (registrations,
  // step reports, rank ends) on the other, so that a burst of rank ends queued behind a scheduling
  // pass (the change lock) cannot hold every thread a submit needs. Outlive the services and the
  // server.
  Executor client_executor_{8};
  Executor executor_{16};
  RpcTimes times_;  // filled by Count, before Start; read by the services
  std::unique_ptr<UdpHeartbeats>
      udp_;  // heartbeats by datagram (before the services: outlives them)
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace moe::controller
