// What a standby controller (leader_election.h) serves on its gRPC address while another leads:
// every call, of any service, is refused with UNAVAILABLE and the leader's address, so that a
// client pointed at a standby learns where to go (moectl and the agents, given several addresses,
// try the next: common/grpc_client.h) and nothing is ever answered from a standby's stale view.
// Same listener and credentials as the real server, which replaces it once this controller leads.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "controller/config.h"

namespace moe::controller {

// The refusal's text: clients look for kStandbyMarker and the address after kLeaderMarker.
inline constexpr char kStandbyMarker[] = "is a standby";
inline constexpr char kLeaderMarker[] = "the leader is at ";

class StandbyServer {
 public:
  explicit StandbyServer(std::string me) : service_(std::move(me)) {}
  ~StandbyServer() { Shutdown(); }
  Status Start(const ServerOptions& options);
  // The leader's address to name in refusals ("": none elected yet).
  void SetLeader(const std::string& leader) { service_.SetLeader(leader); }
  void Shutdown();

 private:
  class Refuser final : public grpc::CallbackGenericService {
   public:
    explicit Refuser(std::string me) : me_(std::move(me)) {}
    grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;
    void SetLeader(const std::string& leader);

   private:
    const std::string me_;
    std::mutex mu_;
    std::string leader_;  // guarded by mu_
  };
  Refuser service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace moe::controller
