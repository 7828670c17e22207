// The agent's node credential (the controller's node_credentials.h): where the controller has
// tokens, the worker token (--token, --token-file) is a bootstrap credential only. The agent
// exchanges it once for its node's credential (WorkerService.Bootstrap), keeps that in a file of
// its own (mode 0600, --node-credential) and presents it from then on: after a restart it reads it
// back. A credential the controller dropped (the node's workers were all forgotten: it left
// cleanly) is bootstrapped again; a revoked one (moectl delete node) stops the agent.
#pragma once

#include <memory>
#include <string>

#include "common/grpc_client.h"
#include "common/status.h"
#include "moe/v1/worker_service.grpc.pb.h"

namespace moe::worker {

class NodeCredential {
 public:
  // `client.token`: the bootstrap token ("" without tokens: nothing to do).
  NodeCredential(const ClientOptions& client, std::string path, std::string node, std::string rack);
  // The token to present now: the node credential once there is one. OK when the agent may
  // register (with `*token`), UNAVAILABLE to try again later (said in the log), anything else
  // fatal.
  Status Ensure(moe::v1::WorkerService::Stub& stub, std::string* token);
  // The controller no longer knows the credential (UNAUTHENTICATED): forget it, bootstrap again.
  void Forget();
  const std::string& path() const { return path_; }

 private:
  Status Bootstrap(moe::v1::WorkerService::Stub& stub);
  ClientOptions client_;  // with the bootstrap token
  std::string path_, node_, rack_;
  std::string credential_;  // "" until loaded or bootstrapped
  bool plain_ = false;      // the controller has no tokens: the token is used as it is
};

}  // namespace moe::worker
