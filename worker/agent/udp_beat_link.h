// The agents' end of UDP heartbeats (common/udp_beat.h): one UDP socket per controller address in
// the process, shared by every agent of it (a node agent's one; fake mode's thousands), written by
// the heartbeat ticker's thread. Acks are read without blocking before each beat and credited to
// their lease, so an agent knows whether its datagrams are heard and heartbeats on its stream as
// well when they are not.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace moe::worker {

class UdpBeatLink {
 public:
  // The process's link to `host`:`port` (made on first use), or null when no socket can reach it
  // (the address does not resolve: the agent heartbeats on its stream). `group` >= 0: a link of
  // that group of agents alone (fake nodes: one per heartbeat ticker, so that the tickers of a
  // process of 2,048 do not contend for one socket and its lock).
  static std::shared_ptr<UdpBeatLink> For(const std::string& host, int port, int group = -1);
  ~UdpBeatLink();
  UdpBeatLink(const UdpBeatLink&) = delete;
  UdpBeatLink& operator=(const UdpBeatLink&) = delete;

  void Add(uint64_t lease_id, const std::string& key);
  void Remove(uint64_t lease_id);
  // Sends beat `seq` of the lease; returns the highest sequence of it acknowledged so far (0:
  // none).
  uint64_t Beat(uint64_t lease_id, uint64_t seq);

 private:
  explicit UdpBeatLink(int fd) : fd_(fd) {}
  void DrainAcksLocked();

  const int fd_;
  struct Lease {
    std::string key;
    uint64_t acked = 0;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Lease> leases_;
};

// The host part of a gRPC target "host:port", "[v6]:port" or "dns:///host:port"; empty for one a
// datagram cannot follow (a Unix socket).
std::string UdpHostOf(const std::string& target);

}  // namespace moe::worker
