// moectl's connection to the controller: one JobService stub, a deadline on every call, and the
// exit codes scripts rely on.
//
// Exit codes: 0 ok; 1 other errors; 2 usage; 3 not found; 4 not allowed (token); 5 controller
// unreachable or too slow; 6 refused (invalid or infeasible request); watch: 0 when the job
// succeeded, 10 failed, 11 cancelled.
#pragma once

#include <google/protobuf/message.h>

#include <memory>
#include <string>

#include "common/grpc_client.h"
#include "common/status.h"
#include "moe/v1/job_service.grpc.pb.h"

namespace moe::cli {

int ExitCodeFor(const Status& st);

struct Client {
  ClientOptions options;
  double timeout = 10;  // seconds, every unary call
  std::unique_ptr<moe::v1::JobService::Stub> stub;

  Status Connect();
  template <typename Req, typename Resp, typename Method>
  Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, options, timeout);
    return FromGrpc((stub.get()->*method)(&ctx, req, resp));
  }
  // Prints the error ("moectl: CODE: message", with a hint when the controller cannot be reached)
  // and returns its exit code.
  int Fail(const Status& st) const;
};

double NowSeconds();

}  // namespace moe::cli
