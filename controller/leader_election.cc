#include "controller/leader_election.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/log.h"

namespace moe::controller {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(200);  // a standby's look at the leader key

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

LeaderElection::LeaderElection(EtcdClient& client, std::string me, int lease_seconds)
    : client_(client),
      me_(std::move(me)),
      key_(client.target().prefix + "/leader"),
      lease_seconds_(lease_seconds) {}

LeaderElection::~LeaderElection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

StatusOr<bool> LeaderElection::TryCreate(EtcdFence* fence) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(key_);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key_);
  put->set_value(me_);
  put->set_lease(lease_);
  txn.add_failure()->mutable_request_range()->set_key(key_);
  MOE_ASSIGN_OR_RETURN(const etcdserverpb::TxnResponse r, client_.Txn(txn));
  fence->key = key_;
  if (r.succeeded()) {
    fence->revision = r.header().revision();  // the put's revision: the key's creation revision
    return true;
  }
  // Held already: by another, or by us (a first try that created it and whose answer was lost,
  // sent again: the key is on our lease).
  const auto& held = r.responses(0).response_range();
  if (held.kvs_size() == 1 && held.kvs(0).lease() == lease_) {
    fence->revision = held.kvs(0).create_revision();
    return true;
  }
  return false;
}

StatusOr<std::string> LeaderElection::Leader() {
  etcdserverpb::RangeRequest request;
  request.set_key(key_);
  MOE_ASSIGN_OR_RETURN(const etcdserverpb::RangeResponse r, client_.Range(request));
  return r.kvs_size() == 0 ? std::string() : r.kvs(0).value();
}

// Our own lease, kept alive while we wait (a new one when it ran out): ready the moment we win.
Status LeaderElection::RenewOwnLease() {
  StatusOr<int64_t> ttl =
      lease_ == 0 ? StatusOr<int64_t>(int64_t{0}) : client_.LeaseKeepAlive(lease_, lease_seconds_);
  const auto sent = Clock::now();
  if (ttl.ok() && *ttl <= 0) {
    auto granted = client_.LeaseGrant(lease_seconds_);
    lease_ = granted.ok() ? *granted : 0;
    if (!granted.ok()) return granted.status();
  } else if (!ttl.ok()) {
    return ttl.status();
  }
  kept_ = sent;
  return OkStatus();
}

StatusOr<EtcdFence> LeaderElection::Campaign(
    const std::function<bool()>& stop, const std::function<void(const std::string&)>& on_leader) {
  std::string seen = "\n";  // no leader noted yet
  auto warned = Clock::now() - std::chrono::hours(1);
  const auto warn = [&](const Status& st) {
    if (Since(warned) < 10) return;
    warned = Clock::now();
    MOE_LOG(WARNING) << "leader election: " << st << " (trying again)";
  };
  while (!stop()) {
    if (lease_ == 0 || Since(kept_) >= lease_seconds_ / 3.0) {
      if (Status st = RenewOwnLease(); !st.ok()) warn(st);
    }
    // Read first: a standby's look is a read, not a write through etcd's raft log every poll.
    StatusOr<std::string> leader = Leader();
    if (leader.ok() && leader->empty() && lease_ != 0) {
      EtcdFence fence;
      StatusOr<bool> won = TryCreate(&fence);
      if (won.ok() && *won) return fence;
      if (!won.ok()) warn(won.status());
    } else if (leader.ok() && *leader != seen) {
      seen = *leader;
      on_leader(seen);
    } else if (!leader.ok()) {
      warn(leader.status());
    }
    std::this_thread::sleep_for(kPoll);
  }
  return CancelledError("stopped before it led");
}

void LeaderElection::KeepLeading(std::function<void(const std::string& why)> on_lost) {
  on_lost_ = std::move(on_lost);
  keeper_ = std::thread([this] { KeepAliveLoop(); });
}

// The first keep-alive at once, then every third of the lease; each bounded by what is left of the
// lease since the last one etcd answered (kept_, from the campaign on), so that a leader cut off
// from etcd stops within its lease, as a standby takes over after it.
void LeaderElection::KeepAliveLoop() {
  const auto every = std::chrono::duration<double>(lease_seconds_ / 3.0);
  std::unique_lock<std::mutex> lock(mu_);
  do {
    lock.unlock();
    const double left = lease_seconds_ - Since(kept_);
    const auto sent = Clock::now();
    const StatusOr<int64_t> ttl =
        left > 0 ? client_.LeaseKeepAlive(lease_, std::max(0.1, left)) : StatusOr<int64_t>(0);
    std::string lost;
    if (ttl.ok() && *ttl <= 0) {
      lost = left > 0 ? "etcd says the leader lease " + std::to_string(lease_) + " is gone"
                      : "this process was stalled past the leader lease";
    } else if (ttl.ok()) {
      kept_ = sent;
    } else if (Since(kept_) >= lease_seconds_) {
      lost = "no keep-alive of the leader lease got through for " + std::to_string(lease_seconds_) +
             " s (" + ttl.status().message() + ")";
    }
    // A stall (SIGSTOP, a frozen VM) longer than the lease: whatever etcd answers now, the lease
    // ran out while this process could not keep it.
    if (lost.empty() && Since(kept_) >= lease_seconds_) {
      lost = "this process was stalled past the leader lease";
    }
    if (!lost.empty()) {
      on_lost_(lost);
      return;
    }
    lock.lock();
  } while (!wake_.wait_for(lock, every, [&] { return stop_; }));
}

Status LeaderElection::StepDown() { return client_.LeaseRevoke(lease_); }

}  // namespace moe::controller
