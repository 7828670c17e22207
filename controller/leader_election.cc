#include "controller/leader_election.h"

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
  if (!r.succeeded()) return false;
  fence->key = key_;
  fence->revision = r.header().revision();  // the put's revision: the key's creation revision
  return true;
}

StatusOr<std::string> LeaderElection::Leader() {
  etcdserverpb::RangeRequest request;
  request.set_key(key_);
  MOE_ASSIGN_OR_RETURN(const etcdserverpb::RangeResponse r, client_.Range(request));
  return r.kvs_size() == 0 ? std::string() : r.kvs(0).value();
}

StatusOr<EtcdFence> LeaderElection::Campaign(
    const std::function<bool()>& stop, const std::function<void(const std::string&)>& on_leader) {
  std::string seen = "\n";  // no leader noted yet
  auto kept = Clock::now();
  double last_warning = -1e9;
  const auto warn = [&](const Status& st) {
    if (Since(kept) - last_warning < 10) return;
    last_warning = Since(kept);
    MOE_LOG(WARNING) << "leader election: " << st << " (trying again)";
  };
  while (!stop()) {
    // Our own lease, kept alive while we wait: a new one when it ran out.
    if (lease_ == 0 || Since(kept) >= lease_seconds_ / 3.0) {
      StatusOr<int64_t> ttl =
          lease_ == 0 ? StatusOr<int64_t>(int64_t{0}) : client_.LeaseKeepAlive(lease_);
      if (ttl.ok() && *ttl <= 0) {
        auto granted = client_.LeaseGrant(lease_seconds_);
        lease_ = granted.ok() ? *granted : 0;
        if (!granted.ok()) ttl = granted.status();
      }
      if (!ttl.ok()) warn(ttl.status());
      kept = Clock::now();
    }
    EtcdFence fence;
    StatusOr<bool> won = lease_ == 0 ? StatusOr<bool>(false) : TryCreate(&fence);
    if (won.ok() && *won) return fence;
    if (!won.ok()) warn(won.status());
    if (StatusOr<std::string> leader = Leader(); leader.ok() && *leader != seen) {
      seen = *leader;
      on_leader(seen);
    }
    std::this_thread::sleep_for(kPoll);
  }
  return CancelledError("stopped before it led");
}

void LeaderElection::KeepLeading(std::function<void(const std::string& why)> on_lost) {
  on_lost_ = std::move(on_lost);
  keeper_ = std::thread([this] { KeepAliveLoop(); });
}

void LeaderElection::KeepAliveLoop() {
  auto kept = Clock::now();  // the last keep-alive etcd answered
  const auto every = std::chrono::duration<double>(lease_seconds_ / 3.0);
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, every, [&] { return stop_; })) {
    lock.unlock();
    const auto sent = Clock::now();
    const StatusOr<int64_t> ttl = client_.LeaseKeepAlive(lease_);
    std::string lost;
    if (ttl.ok() && *ttl <= 0) {
      lost = "etcd says the leader lease " + std::to_string(lease_) + " is gone";
    } else if (ttl.ok()) {
      kept = sent;
    } else if (Since(kept) >= lease_seconds_) {
      lost = "no keep-alive of the leader lease got through for " + std::to_string(lease_seconds_) +
             " s (" + ttl.status().message() + ")";
    }
    // A stall (SIGSTOP, a frozen VM) longer than the lease: whatever etcd answers now, the lease
    // ran out while this process could not keep it.
    if (lost.empty() && Since(kept) >= lease_seconds_) {
      lost = "this process was stalled past the leader lease";
    }
    lock.lock();
    if (!lost.empty()) {
      lock.unlock();
      on_lost_(lost);
      return;
    }
  }
}

Status LeaderElection::StepDown() { return client_.LeaseRevoke(lease_); }

}  // namespace moe::controller
