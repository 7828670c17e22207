#include "common/grpc_client.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "common/file_util.h"

namespace moe {

std::vector<std::string> ControllerAddresses(const std::string& address) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= address.size()) {
    const size_t comma = address.find(',', at);
    const std::string one =
        address.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!one.empty()) out.push_back(one);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string CurrentAddress(const ClientOptions& o) {
  const std::vector<std::string> all = ControllerAddresses(o.address);
  return all.empty() ? std::string() : all[o.address_turn % all.size()];
}

bool IsStandbyRefusal(const Status& st) {
  return st.code() == StatusCode::kUnavailable &&
         st.message().find("is a standby") != std::string::npos;
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o) {
  const std::string address = CurrentAddress(o);
  if (address.empty())
    return InvalidArgumentError("--controller: no address (or set MOE_CONTROLLER)");
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty() || !o.tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!o.tls_ca.empty()) {
      MOE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(o.tls_ca));
    }
    if (!o.tls_cert.empty() || !o.tls_key.empty()) {
      if (o.tls_cert.empty() || o.tls_key.empty())
        return InvalidArgumentError("--tls-cert and --tls-key go together");
      MOE_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFileToString(o.tls_cert));
      MOE_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFileToString(o.tls_key));
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  args.SetMaxSendMessageSize(o.max_message_bytes);
  // A ping every 30 s finds a controller whose host vanished without closing the connection (a
  // stopped or restarted one closes it: seen at once); every 10 s was 1,638 pings a second from
  // 16,384 node agents, each waking both ends, for what the heartbeats' acks already show.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Without BDP probes the receive window stays at HTTP/2's 64 KiB: a page of 100 jobs (about
  // 150 KB) took two window updates, each a round trip through a busy controller's core. Room for
  // a whole answer instead (a window is a promise, not memory: only what is in flight is held).
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kReceiveWindowBytes);
  // Reconnect quickly after a controller restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  if (o.own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // An argument of the channel is part of the key of gRPC's shared pool of connections.
  if (o.connection_group >= 0) args.SetInt("moe.connection_group", o.connection_group);
  return grpc::CreateCustomChannel(address, creds, args);
}

void PrepareContext(grpc::ClientContext* ctx, const ClientOptions& o, double deadline_seconds) {
  if (deadline_seconds > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(deadline_seconds * 1000)));
  }
  if (!o.token.empty()) ctx->AddMetadata("authorization", "Bearer " + o.token);
}

Status CheckSecretFileMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat " + path, errno);
  if ((st.st_mode & 027) != 0) {  // others nothing, the group at most read (0640, 0440)
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
    return PermissionDeniedError(path + " is readable or writable by others (mode " + mode +
                                 "): it holds secrets; chmod 600 " + path);
  }
  return OkStatus();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  if (Status st = CheckSecretFileMode(path); !st.ok()) return st.WithPrefix("--token-file");
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  if (text.empty()) return InvalidArgumentError("--token-file " + path + ": empty");
  if (text.find_first_of(" \t\r\n") != std::string::npos) {
    return InvalidArgumentError("--token-file " + path + ": expected the token alone on one line");
  }
  return text;
}

std::string ConnectionHint(const Status& st, const ClientOptions& o) {
  if (st.code() != StatusCode::kUnavailable) return "";
  const std::string& m = st.message();
  const bool tls = !o.tls_ca.empty() || !o.tls_cert.empty();
  const bool closed = m.find("Socket closed") != std::string::npos ||
                      m.find("handshake") != std::string::npos ||
                      m.find("SSL") != std::string::npos || m.find("ssl") != std::string::npos;
  if (closed && tls && o.tls_cert.empty()) {
    return " (the controller closed the TLS connection: it may require a client certificate, "
           "--tls-cert and --tls-key)";
  }
  if (closed && tls) {
    return " (the TLS handshake failed: the controller does not trust this client certificate, or "
           "--tls-ca is not "
           "the CA of the controller's certificate)";
  }
  if (closed)
    return " (the controller closed the connection: it may require TLS, --tls-ca; or it is "
           "restarting)";
  if (IsStandbyRefusal(st)) return "";
  return " (is the controller running at " + o.address + "?)";
}

Status FromGrpc(const grpc::Status& st) {
  if (st.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
}

}  // namespace moe
