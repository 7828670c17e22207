// Node credentials: the identity of each node's agent where the controller has tokens. A token of
// the worker role is a bootstrap credential only: WorkerService.Bootstrap exchanges it, once per
// node, for a credential bound to that node's name and rack (as the kubelet's TLS bootstrap turns a
// bootstrap token into a node certificate). The agent keeps it (mode 0600) and presents it from
// then on; a registration or rendezvous under it names only its own node and rack, and the names it
// registers stay that node's. The controller keeps the credential's SHA-256, never the credential.
// Revocation (moectl delete node) keeps the record, marked, so that the agent still presenting it
// is told and stops; a node whose workers were all forgotten (they left cleanly, or were lost past
// the retention) has its credential dropped, and may bootstrap again.
//
// Thread-safe: the gRPC threads look credentials up without the controller's lock.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// Hex SHA-256 of `secret`.
std::string Sha256Hex(std::string_view secret);

// Who calls the WorkerService. Without tokens nobody is identified (loopback only: every field
// empty). With tokens: `node` and `rack` from the caller's node credential (a bootstrap token
// reaches only Bootstrap), and `cert_names` from an mTLS client certificate (its subjectAltName DNS
// names and common name).
struct WorkerIdentity {
  std::string node, rack;
  std::vector<std::string> cert_names;
};

// A registration's node and rack against the caller's identity: a node credential's node and rack,
// and a node among an mTLS certificate's names (PERMISSION_DENIED otherwise, naming both).
Status CheckIdentity(const moe::v1::Register& reg, const WorkerIdentity& id);

class NodeCredentials {
 public:
  void Load(const std::vector<moe::v1::NodeCredential>& stored);
  // A new credential for `node` and its record (to be stored, then Add'ed), or why not: the node
  // holds a valid credential already (ALREADY_EXISTS), or `max_nodes` valid credentials exist
  // (RESOURCE_EXHAUSTED).
  StatusOr<std::pair<std::string, moe::v1::NodeCredential>> Prepare(const std::string& node,
                                                                    const std::string& rack,
                                                                    const std::string& issued_by,
                                                                    double now,
                                                                    size_t max_nodes) const;
  // Records a stored credential (issued or revoked).
  void Put(const moe::v1::NodeCredential& c);
  void Drop(const std::string& sha256);
  // The record whose credential is `token` (valid or revoked); none for any other token.
  std::optional<moe::v1::NodeCredential> Find(std::string_view token) const;
  // The valid credential of `node`, if any.
  std::optional<moe::v1::NodeCredential> ValidOf(const std::string& node) const;
  size_t valid() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, moe::v1::NodeCredential> by_sha_;
  std::map<std::string, std::string> valid_by_node_;  // node -> sha256
};

}  // namespace moe::controller
