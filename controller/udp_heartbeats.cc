#include "controller/udp_heartbeats.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "common/udp_beat.h"
#include "prometheus/counter.h"

namespace moe::controller {
namespace {

constexpr int kBatch = 64;

// A bound UDP socket for `host` (an address or a name; "localhost" is 127.0.0.1, as the agents on
// this machine reach it) and `port`, or the error.
StatusOr<int> BindUdp(const std::string& host, int port) {
  const std::string where = "UDP heartbeats on " + host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  if (int rc =
          getaddrinfo(h.empty() ? nullptr : h.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return UnavailableError(where + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0 && res->ai_family == AF_INET6) {
    const int off = 0;  // [::] takes IPv4 agents too
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  const int bufsize = 4 << 20;  // a second's beats of 16,384 agents queue while the reader batches
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  const bool ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0;
  const int err = errno;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    return UnavailableError(where + ": " + std::strerror(err));
  }
  return fd;
}

}  // namespace

void UdpHeartbeats::Count(prometheus::Registry& registry) {
  auto& beats =
      prometheus::BuildCounter()
          .Name("moe_heartbeats_total")
          .Help(
              "Agents' heartbeats heard, by how they came: a UDP datagram or a message on "
              "the agent's gRPC stream (its fallback while datagrams go unanswered)")
          .Register(registry);
  udp_beats_ = &beats.Add({{"transport", "udp"}});
  stream_beats_ = &beats.Add({{"transport", "stream"}});
  refused_beats_ = &prometheus::BuildCounter()
                        .Name("moe_heartbeat_datagrams_refused_total")
                        .Help(
                            "UDP heartbeats refused: malformed, an unknown or closed lease, a MAC "
                            "that is not the lease's key, or a sequence already seen (a replay)")
                        .Register(registry)
                        .Add({});
}

Status UdpHeartbeats::Start(const std::string& host, int port) {
  MOE_ASSIGN_OR_RETURN(fd_, BindUdp(host, port));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  port_ = port;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {  // port 0: the kernel's
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  reader_ = std::thread([this] { Loop(); });
  return OkStatus();
}

void UdpHeartbeats::Stop() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void UdpHeartbeats::Grant(const std::string& name, const void* channel, moe::v1::Registered* out) {
  if (fd_ < 0) return;  // not serving: the agent heartbeats on its stream
  const uint64_t id = beat::NewLeaseId();
  std::string key = beat::NewKey();
  out->set_heartbeat_udp_port(port_);
  out->set_heartbeat_lease_id(id);
  out->set_heartbeat_key(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = id_of_.find(name); it != id_of_.end()) by_id_.erase(it->second);
  id_of_[name] = id;
  by_id_[id] = Lease{name, channel, std::move(key), 0};
}

bool UdpHeartbeats::Renew(const uint8_t* data, size_t size, uint8_t* ack) {
  const std::optional<beat::Header> h = beat::Peek(data, size);
  if (!h || h->kind != beat::Kind::kBeat) return false;
  std::string name, key;
  const void* channel = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(h->lease_id);
    if (it == by_id_.end() || h->seq <= it->second.seq ||
        !beat::Verify(data, size, it->second.key)) {
      return false;
    }
    it->second.seq = h->seq;
    name = it->second.name;
    channel = it->second.channel;
    key = it->second.key;
  }
  if (!leases_.Renew(name, channel)) return false;  // lost or reconnected: no ack, no renewal
  const beat::Datagram d = beat::Encode({beat::Kind::kAck, h->lease_id, h->seq}, key);
  std::memcpy(ack, d.data(), d.size());
  return true;
}

// Reads whatever has arrived in batches, then waits 10 ms before looking again: a second's
// heartbeats cost about a hundred wake-ups however many agents send them.
void UdpHeartbeats::Loop() {
  std::array<std::array<uint8_t, 64>, kBatch> in{};
  std::array<beat::Datagram, kBatch> out{};
  std::array<sockaddr_storage, kBatch> from{};
  std::array<iovec, kBatch> in_iov{}, out_iov{};
  std::array<mmsghdr, kBatch> in_msg{}, out_msg{};
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    for (;;) {
      for (int i = 0; i < kBatch; ++i) {
        in_iov[i] = {in[i].data(), in[i].size()};
        in_msg[i] = {};
        in_msg[i].msg_hdr.msg_iov = &in_iov[i];
        in_msg[i].msg_hdr.msg_iovlen = 1;
        in_msg[i].msg_hdr.msg_name = &from[i];
        in_msg[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
      }
      const int n = recvmmsg(fd_, in_msg.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (n <= 0) break;
      int acks = 0;
      for (int i = 0; i < n; ++i) {
        if (!Renew(in[i].data(), in_msg[i].msg_len, out[acks].data())) {
          ++refused_;
          if (refused_beats_ != nullptr) refused_beats_->Increment();
          continue;
        }
        ++renewed_;
        if (udp_beats_ != nullptr) udp_beats_->Increment();
        out_iov[acks] = {out[acks].data(), out[acks].size()};
        out_msg[acks] = {};
        out_msg[acks].msg_hdr.msg_iov = &out_iov[acks];
        out_msg[acks].msg_hdr.msg_iovlen = 1;
        out_msg[acks].msg_hdr.msg_name = &from[i];
        out_msg[acks].msg_hdr.msg_namelen = in_msg[i].msg_hdr.msg_namelen;
        ++acks;
      }
      if (acks > 0) sendmmsg(fd_, out_msg.data(), acks, MSG_DONTWAIT);  // a lost ack: a stream beat
      if (n < kBatch) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace moe::controller
