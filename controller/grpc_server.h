// The gRPC face of the controller: JobService and WorkerService on the callback API (a waiting RPC
// holds no thread), bearer-token roles, explicit message-size limits, the standard health service and
// reflection.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "controller/auth.h"
#include "controller/controller.h"

namespace moe::controller {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";
  std::string tls_cert, tls_key;   // PEM files: TLS on when both are set
  std::string tls_client_ca;       // PEM: also require and verify client certificates (mTLS)
  int max_message_bytes = 16 << 20;
};

grpc::Status ToGrpc(const Status& st);

class GrpcServer {
 public:
  GrpcServer(Controller& controller, const TokenAuth& auth);
  ~GrpcServer();
  Status Start(const ServerOptions& options);
  int port() const { return port_; }
  void Shutdown();

 private:
  class JobServiceImpl;
  class WorkerServiceImpl;
  Controller& controller_;
  const TokenAuth& auth_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace moe::controller
