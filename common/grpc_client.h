// Client side of the controller's gRPC API, shared by moectl and the worker agent: TLS/mTLS
// channels, bearer tokens, message-size limits and deadlines on every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

struct ClientOptions {
  // host:port, or several separated by commas: a leader and its standbys (moe-controller --store
  // etcd://...), tried in turn (address_turn) until one leads.
  std::string address;
  size_t address_turn = 0;        // which of several addresses MakeChannel connects to
  std::string token;              // bearer token ("" for none)
  std::string tls_ca;             // PEM of the CA that signed the controller's certificate: TLS on
  std::string tls_cert, tls_key;  // client certificate for mTLS
  int max_message_bytes = 16 << 20;
  // Its own TCP connection even when another channel of this process reaches the same address (many
  // fake node agents in one process, each standing for a node with a connection of its own).
  bool own_connection = false;
  // With own_connection false: channels of this process with the same group share one connection,
  // channels of different groups never do (-1: no group). Fake nodes use it to stand for many
  // agents on a few connections (moe-worker --fake-agents-per-connection).
  int connection_group = -1;
};

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);
// The HTTP/2 receive window MakeChannel asks for (GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES).
inline constexpr int kReceiveWindowBytes = 8 << 20;
// The addresses in options.address, in order; the one MakeChannel uses now.
std::vector<std::string> ControllerAddresses(const std::string& address);
std::string CurrentAddress(const ClientOptions& options);
// A standby's refusal (moe-controller --store etcd): "...is a standby...; the leader is at ADDR".
bool IsStandbyRefusal(const Status& st);
// OK when others may not touch `path` and its group may at most read it (0600, 0640, 0440);
// PERMISSION_DENIED naming the mode otherwise. For files that hold secrets (tokens).
Status CheckSecretFileMode(const std::string& path);
// The bearer token in `path`: one line, the file readable by its owner alone (mode 0600 or
// stricter), so that the token never shows on a command line (ps) and no one else reads it.
StatusOr<std::string> ReadTokenFile(const std::string& path);
// A hint for a failed call's error, from what the client knows (TLS on or off): an mTLS refusal
// and a plain-text client talking to a TLS controller both read "Socket closed" otherwise.
std::string ConnectionHint(const Status& st, const ClientOptions& options);
// Sets the deadline and the authorization metadata of one call.
void PrepareContext(grpc::ClientContext* ctx, const ClientOptions& options,
                    double deadline_seconds);
// grpc::Status -> Status (same codes).
Status FromGrpc(const grpc::Status& st);

}  // namespace moe
