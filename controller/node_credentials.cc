#include "controller/node_credentials.h"

#include <openssl/sha.h>
#include <sys/random.h>

#include <algorithm>

#include "common/check.h"

namespace moe::controller {

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 15];
  }
  return out;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(buf.data() + got, bytes - got, 0);
    MOE_CHECK(n > 0) << "getrandom failed";
    got += static_cast<size_t>(n);
  }
  return Hex(buf.data(), bytes);
}

}  // namespace

std::string Sha256Hex(std::string_view secret) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  ::SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), md);
  return Hex(md, sizeof(md));
}

Status CheckIdentity(const moe::v1::Register& reg, const WorkerIdentity& id) {
  if (!id.node.empty() && reg.node() != id.node) {
    return PermissionDeniedError("register: node " + reg.node() + " is not this credential's (" +
                                 id.node + "): a node credential registers only its own node");
  }
  if (!id.node.empty() && !id.rack.empty() && reg.rack() != id.rack) {
    return PermissionDeniedError("register: rack " + reg.rack() + " is not node " + id.node +
                                 "'s (" + id.rack + ", bound when it bootstrapped)");
  }
  if (!id.cert_names.empty() &&
      std::find(id.cert_names.begin(), id.cert_names.end(), reg.node()) == id.cert_names.end()) {
    std::string names;
    for (const auto& n : id.cert_names) names += (names.empty() ? "" : ", ") + n;
    return PermissionDeniedError("register: node " + reg.node() +
                                 " is not among the client certificate's names (" + names + ")");
  }
  return OkStatus();
}

void NodeCredentials::Load(const std::vector<moe::v1::NodeCredential>& stored) {
  for (const auto& c : stored) Put(c);
}

StatusOr<std::pair<std::string, moe::v1::NodeCredential>> NodeCredentials::Prepare(
    const std::string& node, const std::string& rack, const std::string& issued_by, double now,
    size_t max_nodes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = valid_by_node_.find(node); it != valid_by_node_.end()) {
    const moe::v1::NodeCredential& c = by_sha_.at(it->second);
    return AlreadyExistsError(
        "node " + node + " already holds a credential (issued at " +
        std::to_string(static_cast<int64_t>(c.issued_at())) +
        "): a node bootstraps once; its agent keeps the credential (moe-worker "
        "--node-credential). An admin revokes it with 'moectl delete node " +
        node + "'; it is dropped by itself once the node's workers are all forgotten");
  }
  if (valid_by_node_.size() >= max_nodes) {
    return ResourceExhaustedError("bootstrap: " + std::to_string(valid_by_node_.size()) +
                                  " nodes hold credentials, the limit (moe-controller "
                                  "--max-nodes); 'moectl delete node' frees one");
  }
  std::string credential = "moe-node-" + RandomHex(32);
  moe::v1::NodeCredential c;
  c.set_sha256(Sha256Hex(credential));
  c.set_node(node);
  c.set_rack(rack);
  c.set_issued_at(now);
  c.set_issued_by(issued_by);
  return std::make_pair(std::move(credential), std::move(c));
}

void NodeCredentials::Put(const moe::v1::NodeCredential& c) {
  std::lock_guard<std::mutex> lock(mu_);
  by_sha_[c.sha256()] = c;
  auto it = valid_by_node_.find(c.node());
  if (c.revoked_at() == 0) {
    valid_by_node_[c.node()] = c.sha256();
  } else if (it != valid_by_node_.end() && it->second == c.sha256()) {
    valid_by_node_.erase(it);
  }
}

void NodeCredentials::Drop(const std::string& sha256) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_sha_.find(sha256);
  if (it == by_sha_.end()) return;
  auto v = valid_by_node_.find(it->second.node());
  if (v != valid_by_node_.end() && v->second == sha256) valid_by_node_.erase(v);
  by_sha_.erase(it);
}

// By the credential's hash: a lookup that reveals nothing of the stored hashes by its timing that
// the hash does not already hide.
std::optional<moe::v1::NodeCredential> NodeCredentials::Find(std::string_view token) const {
  if (token.rfind("moe-node-", 0) != 0) return std::nullopt;
  const std::string sha = Sha256Hex(token);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_sha_.find(sha);
  if (it == by_sha_.end()) return std::nullopt;
  return it->second;
}

std::optional<moe::v1::NodeCredential> NodeCredentials::ValidOf(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = valid_by_node_.find(node);
  if (it == valid_by_node_.end()) return std::nullopt;
  return by_sha_.at(it->second);
}

size_t NodeCredentials::valid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return valid_by_node_.size();
}

}  // namespace moe::controller
