// A small client of etcd v3's gRPC API (KV and Lease), generated from etcd's own .proto files
// (scripts/fetch-etcd-protos.sh). What the controller's etcd store (etcd_store.h) and its leader
// election (leader_election.h) need, and nothing more: ranges, transactions, leases.
//
// Endpoints: a channel per member; a try that finds its member unreachable or silent for
// kTrySeconds goes to the next one, so a member's loss (the raft leader's included) costs a try or
// two, not the controller. Every call has a deadline (all its tries). Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace moe::controller {

// --store etcd://host:port[,host:port...][/prefix]: the members and the key prefix of this
// controller's records (default /moe; several clusters may share one etcd under their own).
struct EtcdTarget {
  std::vector<std::string> endpoints;
  std::string prefix = "/moe";
};
// Parses the URL; INVALID_ARGUMENT naming the part that is wrong.
StatusOr<EtcdTarget> ParseEtcdUrl(const std::string& url);
// The end of the range of every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(const std::string& prefix);

class EtcdClient {
 public:
  // One try on one member: etcd answers a healthy request in milliseconds, and an election takes
  // about a second.
  static constexpr double kTrySeconds = 1.0;
  // Channels to every endpoint; nothing is sent yet. `deadline_seconds`: a call's tries in all.
  explicit EtcdClient(const EtcdTarget& target, double deadline_seconds = 10.0);

  const EtcdTarget& target() const { return target_; }
  StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  // A transaction, sent again to the next member while a try fails: for those whose second apply
  // changes nothing (guarded by a compare, or reads).
  StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  // One try on one member, within `seconds`: the writes whose outcome the caller settles itself
  // when the answer is lost (EtcdStateStore's commit count). A failure moves the next call to
  // another member.
  StatusOr<etcdserverpb::TxnResponse> TxnOnce(const etcdserverpb::TxnRequest& request,
                                              double seconds);
  // A lease of `ttl_seconds`: its id.
  StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds);
  // One keep-alive, its tries within `budget_seconds` (0: the client's deadline): the lease's
  // remaining TTL in seconds (0 or less: the lease is gone).
  StatusOr<int64_t> LeaseKeepAlive(int64_t lease, double budget_seconds = 0);
  Status LeaseRevoke(int64_t lease);
  // Waits until a member answers (a Range of one key), at most `seconds`.
  Status WaitReady(double seconds);

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  // Runs `call` on the current member, then on each other one while the answer is UNAVAILABLE.
  template <typename Call>
  Status OnSomeMember(const char* what, Call call, double budget_seconds = 0);

  EtcdTarget target_;
  double deadline_seconds_;
  std::vector<Member> members_;
  std::atomic<size_t> current_{0};
};

}  // namespace moe::controller
