#include "controller/standby_server.h"

#include "controller/grpc_server.h"

namespace moe::controller {

namespace {

class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(const std::string& why) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerGenericBidiReactor* StandbyServer::Refuser::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  std::string leader;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader = leader_;
  }
  std::string why =
      "moe-controller " + me_ + " " + kStandbyMarker + " (" + ctx->method() + " not served here); ";
  why += leader.empty() ? std::string("no leader is elected yet: try again in a few seconds")
                        : kLeaderMarker + leader;
  return new Refusal(why);
}

void StandbyServer::Refuser::SetLeader(const std::string& leader) {
  std::lock_guard<std::mutex> lock(mu_);
  leader_ = leader;
}

Status StandbyServer::Start(const ServerOptions& o) {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, ServerCredentialsFor(o));
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &port);
  builder.RegisterCallbackGenericService(&service_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) return GrpcServer::ListenError(o);
  return OkStatus();
}

void StandbyServer::Shutdown() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now());  // cancels every refusal under way
  server_->Wait();
  server_.reset();
}

}  // namespace moe::controller
