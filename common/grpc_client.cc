#include "common/grpc_client.h"

#include <chrono>

#include "common/file_util.h"

namespace moe {

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o) {
  if (o.address.empty()) return InvalidArgumentError("--controller: no address (or set MOE_CONTROLLER)");
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty() || !o.tls_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!o.tls_ca.empty()) {
      MOE_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(o.tls_ca));
    }
    if (!o.tls_cert.empty() || !o.tls_key.empty()) {
      if (o.tls_cert.empty() || o.tls_key.empty()) return InvalidArgumentError("--tls-cert and --tls-key go together");
      MOE_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadFileToString(o.tls_cert));
      MOE_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadFileToString(o.tls_key));
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  args.SetMaxSendMessageSize(o.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a controller restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(o.address, creds, args);
}

void PrepareContext(grpc::ClientContext* ctx, const ClientOptions& o, double deadline_seconds) {
  if (deadline_seconds > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(deadline_seconds * 1000)));
  }
  if (!o.token.empty()) ctx->AddMetadata("authorization", "Bearer " + o.token);
}

Status FromGrpc(const grpc::Status& st) {
  if (st.ok()) return OkStatus();
  return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
}

}  // namespace moe
