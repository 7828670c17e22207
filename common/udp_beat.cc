#include "common/udp_beat.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cstring>

namespace moe::beat {
namespace {

// Layout: "MB" magic, version 1, kind, 4 bytes zero | lease id (LE) | seq (LE) | MAC (16 bytes).
constexpr uint8_t kMagic0 = 'M', kMagic1 = 'B', kVersion = 1;
constexpr size_t kSigned = 24, kMacBytes = 16;

void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::array<uint8_t, kMacBytes> Mac(const uint8_t* signed_bytes, const std::string& key) {
  unsigned char full[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), signed_bytes, kSigned, full, &n);
  std::array<uint8_t, kMacBytes> out{};
  std::memcpy(out.data(), full, kMacBytes);
  return out;
}

void Random(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got <= 0) continue;  // EINTR; the kernel's pool is always ready after boot
    p += got;
    n -= static_cast<size_t>(got);
  }
}

}  // namespace

Datagram Encode(const Header& h, const std::string& key) {
  Datagram d{};
  d[0] = kMagic0;
  d[1] = kMagic1;
  d[2] = kVersion;
  d[3] = static_cast<uint8_t>(h.kind);
  PutLe64(d.data() + 8, h.lease_id);
  PutLe64(d.data() + 16, h.seq);
  const auto mac = Mac(d.data(), key);
  std::memcpy(d.data() + kSigned, mac.data(), kMacBytes);
  return d;
}

std::optional<Header> Peek(const uint8_t* data, size_t size) {
  if (size != kDatagramBytes || data[0] != kMagic0 || data[1] != kMagic1 || data[2] != kVersion)
    return std::nullopt;
  if (data[3] != static_cast<uint8_t>(Kind::kBeat) && data[3] != static_cast<uint8_t>(Kind::kAck))
    return std::nullopt;
  Header h;
  h.kind = static_cast<Kind>(data[3]);
  h.lease_id = GetLe64(data + 8);
  h.seq = GetLe64(data + 16);
  return h;
}

bool Verify(const uint8_t* data, size_t size, const std::string& key) {
  if (size != kDatagramBytes || key.empty()) return false;
  const auto mac = Mac(data, key);
  return CRYPTO_memcmp(mac.data(), data + kSigned, kMacBytes) == 0;
}

uint64_t NewLeaseId() {
  uint64_t id = 0;
  while (id == 0) Random(&id, sizeof id);
  return id;
}

std::string NewKey() {
  std::string key(kKeyBytes, '\0');
  Random(key.data(), key.size());
  return key;
}

}  // namespace moe::beat
