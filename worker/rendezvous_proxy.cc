#include "worker/rendezvous_proxy.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/log.h"
#include "worker/engine/comm/store.h"

namespace moe::worker {

RendezvousProxy::RendezvousProxy(std::shared_ptr<moe::v1::WorkerService::Stub> stub, ClientOptions client,
                                 std::string socket_path, std::string prefix)
    : stub_(std::move(stub)), client_(std::move(client)), path_(std::move(socket_path)), prefix_(std::move(prefix)) {}

RendezvousProxy::~RendezvousProxy() { Stop(); }

Status RendezvousProxy::Start() {
  ::unlink(path_.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoError("socket", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) return InvalidArgumentError("rendezvous socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return ErrnoError("bind " + path_, errno);
  if (::listen(listen_fd_, 16) != 0) return ErrnoError("listen " + path_, errno);
  acceptor_ = std::thread([this] { Accept(); });
  return OkStatus();
}

void RendezvousProxy::Stop() {
  if (stop_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& t : connections_) if (t.joinable()) t.join();
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

std::string RendezvousProxy::Handle(const std::string& line) {
  std::istringstream in(line);
  std::string op;
  in >> op;
  auto err = [](const grpc::Status& st) {
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return "TIMEOUT " + st.error_message();
    return "ERR " + st.error_message();
  };
  if (op == "SET") {
    std::string hk, hv, key, value;
    in >> hk >> hv;
    if (!HexDecode(hk, &key) || !HexDecode(hv, &value)) return "ERR malformed request";
    moe::v1::RendezvousSetRequest req;
    req.set_key(prefix_ + key);
    req.set_value(value);
    moe::v1::RendezvousSetResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, client_, 30);
    const grpc::Status st = stub_->RendezvousSet(&ctx, req, &resp);
    return st.ok() ? "OK" : err(st);
  }
  if (op == "GET") {
    std::string hk, key;
    in >> hk;
    if (!HexDecode(hk, &key)) return "ERR malformed request";
    moe::v1::RendezvousGetRequest req;
    req.set_key(prefix_ + key);
    moe::v1::RendezvousGetResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, client_, 30);
    const grpc::Status st = stub_->RendezvousGet(&ctx, req, &resp);
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) return "NOTFOUND";
    return st.ok() ? "VAL " + HexEncode(resp.value()) : err(st);
  }
  if (op == "WAIT") {
    int64_t timeout_ms = 0;
    in >> timeout_ms;
    moe::v1::RendezvousWaitRequest req;
    std::string hk, key;
    while (in >> hk) {
      if (!HexDecode(hk, &key)) return "ERR malformed request";
      req.add_keys(prefix_ + key);
    }
    req.set_timeout_seconds(std::max<double>(0.001, timeout_ms / 1000.0));
    moe::v1::RendezvousWaitResponse resp;
    grpc::ClientContext ctx;
    PrepareContext(&ctx, client_, timeout_ms / 1000.0 + 10);
    const grpc::Status st = stub_->RendezvousWait(&ctx, req, &resp);
    return st.ok() ? "OK" : err(st);
  }
  return "ERR unknown request '" + op + "'";
}

}  // namespace moe::worker
