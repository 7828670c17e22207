// Heartbeats as UDP datagrams (docs/architecture.md, "Leases"): a node agent renews its lease with
// a 40-byte datagram a second instead of a message on its gRPC stream, which costs the controller
// gRPC's and HTTP/2's per-message work (about 61 µs here) where a datagram, read in batches, costs
// a few.
//
// A datagram names the lease by the random id the controller gave it at registration (over the
// authenticated stream), carries a sequence number that only grows, and ends in a MAC keyed by the
// lease's own secret (HMAC-SHA256, 128 bits kept): nobody without the key can renew a lease, and a
// replayed datagram is refused by its sequence. The controller answers each renewing beat with an
// ack of the same form; an agent that hears no ack keeps heartbeating on its stream (a firewall
// that drops UDP costs nothing but the saving).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace moe::beat {

inline constexpr size_t kDatagramBytes = 40;
inline constexpr size_t kKeyBytes = 32;

enum class Kind : uint8_t { kBeat = 1, kAck = 2 };

struct Header {
  Kind kind = Kind::kBeat;
  uint64_t lease_id = 0;
  uint64_t seq = 0;
};

using Datagram = std::array<uint8_t, kDatagramBytes>;

// The datagram for `h`, authenticated with `key` (kKeyBytes).
Datagram Encode(const Header& h, const std::string& key);

// The header of a datagram of the right size, magic and version, or nothing. Says nothing of its
// authenticity: look the lease's key up by `lease_id`, then Verify.
std::optional<Header> Peek(const uint8_t* data, size_t size);

// True when the datagram's MAC is `key`'s (constant time).
bool Verify(const uint8_t* data, size_t size, const std::string& key);

// A fresh random lease id (never 0) and key, from the kernel's random source.
uint64_t NewLeaseId();
std::string NewKey();

}  // namespace moe::beat
