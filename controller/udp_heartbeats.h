// The controller's end of UDP heartbeats (common/udp_beat.h): one thread reads the agents'
// datagrams in batches (recvmmsg), renews each lease in the LeaseBook (its own lock: never the
// controller's, never the store) and acknowledges it (sendmmsg), so that 16,384 node agents
// heartbeating once a second cost a few percent of a core instead of gRPC's per-message work.
//
// Thread-safety: Grant comes from the registration path, the reader is its own thread; both take
// mu_ only to look the lease up.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "controller/lease_book.h"
#include "moe/v1/worker_service.pb.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace moe::controller {

class UdpHeartbeats {
 public:
  explicit UdpHeartbeats(LeaseBook& leases) : leases_(leases) {}
  ~UdpHeartbeats() { Stop(); }
  UdpHeartbeats(const UdpHeartbeats&) = delete;
  UdpHeartbeats& operator=(const UdpHeartbeats&) = delete;

  // Binds UDP `host`:`port` (the gRPC listener's own address and port) and starts reading. The
  // error names the address.
  Status Start(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }

  // The agent `name` registered on the stream `channel` (the LeaseBook's token for it): a fresh
  // lease id and key for its heartbeats, written into `out`. Replaces the agent's earlier one.
  void Grant(const std::string& name, const void* channel, moe::v1::Registered* out);

  // moe_heartbeats_total{transport="udp"|"stream"} and moe_heartbeat_datagrams_refused_total in
  // `registry` (before Start).
  void Count(prometheus::Registry& registry);
  // A heartbeat that came on a stream (counted only).
  void NoteStreamBeat() {
    if (stream_beats_ != nullptr) stream_beats_->Increment();
  }

  // Datagrams that renewed a lease, and those refused (malformed, unknown lease, bad MAC, replayed
  // sequence, or a lease the book has closed).
  int64_t renewed() const { return renewed_.load(); }
  int64_t refused() const { return refused_.load(); }

 private:
  struct Lease {
    std::string name;
    const void* channel = nullptr;
    std::string key;
    uint64_t seq = 0;  // the highest sequence accepted
  };
  void Loop();
  // One datagram: true and the ack in `ack` (kDatagramBytes) when it renewed its lease.
  bool Renew(const uint8_t* data, size_t size, uint8_t* ack);

  LeaseBook& leases_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::mutex mu_;
  std::unordered_map<uint64_t, Lease> by_id_;
  std::unordered_map<std::string, uint64_t> id_of_;
  std::atomic<int64_t> renewed_{0}, refused_{0};
  prometheus::Counter* udp_beats_ = nullptr;
  prometheus::Counter* stream_beats_ = nullptr;
  prometheus::Counter* refused_beats_ = nullptr;
};

}  // namespace moe::controller
