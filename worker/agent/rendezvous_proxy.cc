#include "worker/agent/rendezvous_proxy.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/kv_protocol.h"
#include "common/log.h"

namespace moe::worker {

RendezvousProxy::RendezvousProxy(std::shared_ptr<moe::v1::WorkerService::Stub> stub,
                                 ClientOptions client, std::string socket_path, std::string prefix,
                                 std::shared_ptr<SessionCredential> session)
    : stub_(std::move(stub)),
      client_(std::move(client)),
      path_(std::move(socket_path)),
      prefix_(std::move(prefix)),
      session_(std::move(session)) {}

void RendezvousProxy::Prepare(grpc::ClientContext* ctx, double deadline_seconds) const {
  PrepareContext(ctx, client_, deadline_seconds);
  ctx->AddMetadata("x-moe-session", session_->Get());
}

RendezvousProxy::~RendezvousProxy() { Stop(); }

Status RendezvousProxy::Start() {
  ::unlink(path_.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoError("socket", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path))
    return InvalidArgumentError("rendezvous socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return ErrnoError("bind " + path_, errno);
  if (::listen(listen_fd_, 16) != 0) return ErrnoError("listen " + path_, errno);
  acceptor_ = std::thread([this] { Accept(); });
  return OkStatus();
}

void RendezvousProxy::Stop() {
  if (stop_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& t : connections_)
    if (t.joinable()) t.join();
  for (int fd : fds_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::unlink(path_.c_str());
}

void RendezvousProxy::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    fds_.push_back(fd);
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void RendezvousProxy::Serve(int fd) {
  std::string buffer;
  char buf[4096];
  while (!stop_) {
    const auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      const std::string reply = Handle(buffer.substr(0, nl)) + "\n";
      buffer.erase(0, nl + 1);
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buffer.append(buf, static_cast<size_t>(n));
  }
}

namespace {

// A gRPC status in the store's terms (NOT_FOUND, DEADLINE_EXCEEDED, anything else UNAVAILABLE).
Status FromGrpc(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return OkStatus();
    case grpc::StatusCode::NOT_FOUND:
      return NotFoundError(st.error_message());
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return DeadlineExceededError(st.error_message());
    default:
      return UnavailableError(st.error_message());
  }
}

}  // namespace

std::string RendezvousProxy::Handle(const std::string& line) {
  auto parsed = ParseKvRequest(line);
  if (!parsed.ok()) return FormatKvReply(parsed.status());
  const KvRequest& r = *parsed;
  grpc::ClientContext ctx;
  switch (r.op) {
    case KvRequest::Op::kSet: {
      moe::v1::RendezvousSetRequest req;
      req.set_key(prefix_ + r.keys[0]);
      req.set_value(r.value);
      moe::v1::RendezvousSetResponse resp;
      Prepare(&ctx, 30);
      return FormatKvReply(FromGrpc(stub_->RendezvousSet(&ctx, req, &resp)));
    }
    case KvRequest::Op::kGet: {
      moe::v1::RendezvousGetRequest req;
      req.set_key(prefix_ + r.keys[0]);
      moe::v1::RendezvousGetResponse resp;
      Prepare(&ctx, 30);
      const Status st = FromGrpc(stub_->RendezvousGet(&ctx, req, &resp));
      return st.ok() ? FormatKvValue(resp.value()) : FormatKvReply(st);
    }
    case KvRequest::Op::kWait: {
      moe::v1::RendezvousWaitRequest req;
      for (const auto& k : r.keys) req.add_keys(prefix_ + k);
      req.set_timeout_seconds(std::max<double>(0.001, static_cast<double>(r.timeout_ms) / 1000.0));
      moe::v1::RendezvousWaitResponse resp;
      Prepare(&ctx, static_cast<double>(r.timeout_ms) / 1000.0 + 10);
      return FormatKvReply(FromGrpc(stub_->RendezvousWait(&ctx, req, &resp)));
    }
  }
  return FormatKvReply(InternalError("unhandled request"));
}

}  // namespace moe::worker
