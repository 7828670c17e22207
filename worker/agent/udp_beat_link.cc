#include "worker/agent/udp_beat_link.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <map>

#include "common/log.h"
#include "common/udp_beat.h"

namespace moe::worker {

std::string UdpHostOf(const std::string& target) {
  std::string t = target;
  if (t.rfind("unix:", 0) == 0 || t.rfind("unix-abstract:", 0) == 0) return "";
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:", "dns:"}) {
    if (t.rfind(scheme, 0) == 0) {
      t = t.substr(std::string(scheme).size());
      break;
    }
  }
  const size_t colon = t.rfind(':');
  if (colon == std::string::npos) return "";
  t = t.substr(0, colon);
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  return t;
}

std::shared_ptr<UdpBeatLink> UdpBeatLink::For(const std::string& host, int port, int group) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::weak_ptr<UdpBeatLink>> links;
  const std::string where = host + ":" + std::to_string(port);
  std::lock_guard<std::mutex> lock(mu);
  if (auto link = links[{where, group}].lock()) return link;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    MOE_LOG(WARNING) << "no UDP heartbeats to " << where << " (" << gai_strerror(rc)
                     << "): heartbeating on the stream";
    return nullptr;
  }
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  // The agents of the process (or of its group) share the socket, and acks are read only when one
  // of them beats: room for a second of 2,048 agents' (capped by net.core.rmem_max).
  const int bufsize = 1 << 20;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  const bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    MOE_LOG(WARNING) << "no UDP heartbeats to " << where << ": heartbeating on the stream";
    return nullptr;
  }
  std::shared_ptr<UdpBeatLink> link(new UdpBeatLink(fd));
  links[{where, group}] = link;
  return link;
}

UdpBeatLink::~UdpBeatLink() { close(fd_); }

void UdpBeatLink::Add(uint64_t lease_id, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  leases_[lease_id] = Lease{key, 0};
}

void UdpBeatLink::Remove(uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  leases_.erase(lease_id);
}

// Acks that do not verify (another lease's, forged, or from a lease already removed) are dropped.
void UdpBeatLink::DrainAcksLocked() {
  std::array<uint8_t, 64> buf{};
  for (;;) {
    const ssize_t n = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) return;  // EAGAIN: nothing more; ECONNREFUSED: no listener (yet): no acks
    const auto h = beat::Peek(buf.data(), static_cast<size_t>(n));
    if (!h || h->kind != beat::Kind::kAck) continue;
    auto it = leases_.find(h->lease_id);
    if (it == leases_.end() || h->seq <= it->second.acked ||
        !beat::Verify(buf.data(), static_cast<size_t>(n), it->second.key)) {
      continue;
    }
    it->second.acked = h->seq;
  }
}

uint64_t UdpBeatLink::Beat(uint64_t lease_id, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  DrainAcksLocked();
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return 0;
  const beat::Datagram d = beat::Encode({beat::Kind::kBeat, lease_id, seq}, it->second.key);
  send(fd_, d.data(), d.size(),
       MSG_DONTWAIT);  // a full buffer or refused port: no ack, stream beat
  return it->second.acked;
}

}  // namespace moe::worker
