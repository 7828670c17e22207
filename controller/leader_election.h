// One leader among any number of moe-controllers on one etcd: the leader holds <prefix>/leader,
// put on an etcd lease of --leader-lease-seconds that it keeps alive; the others (standbys) wait
// for the key to go, then try to create it. Creating the key is a transaction that succeeds only
// where the key is absent (its creation revision 0), so at most one wins; the winner's creation
// revision is its fence (etcd_store.h): every write it makes compares it, and one that lost its
// lease (a stall past the TTL, a partition, SIGSTOP) writes nothing more.
//
//   standby: Campaign() ── key absent? ──▶ create it on our lease ─▶ leader: KeepLeading()
//               ▲   └─ held by another: note it, wait (keep our lease alive), try again
//               └────────────── the process exits when the lease is lost; its supervisor restarts
//               it
//
// Losing the lease ends the leadership for good in this process (on_lost): the controller stops,
// and its supervisor (systemd, Kubernetes, Slurm's job step) starts it again as a standby. Stepping
// down (moectl admin step-down) revokes the lease: the key goes at once and a standby takes over.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "controller/etcd_client.h"
#include "controller/etcd_store.h"

namespace moe::controller {

class LeaderElection {
 public:
  // `me`: the address clients reach this controller at (its --advertise-address).
  LeaderElection(EtcdClient& client, std::string me, int lease_seconds);
  ~LeaderElection();  // stops keeping the lease alive (it then runs out: no revoke)

  // Blocks until this controller leads, or until `stop()` says to give up (CANCELLED). Calls
  // `on_leader` with the leader's address whenever it changes while waiting ("" when there is
  // none).
  StatusOr<EtcdFence> Campaign(const std::function<bool()>& stop,
                               const std::function<void(const std::string&)>& on_leader);
  // After Campaign: keeps the lease alive on a thread of its own; calls `on_lost` once, from that
  // thread, when etcd says the lease is gone or when no keep-alive got through for the lease's TTL.
  void KeepLeading(std::function<void(const std::string& why)> on_lost);
  // Revokes the lease: the leader key goes now (a standby takes over within its poll).
  Status StepDown();
  // The leader's address as etcd has it ("" when none), for standbys' refusals.
  StatusOr<std::string> Leader();
  const std::string& key() const { return key_; }
  int64_t lease() const { return lease_; }

 private:
  // One try: true when this controller now holds the key.
  StatusOr<bool> TryCreate(EtcdFence* fence);
  // Keeps the standby's own lease alive, or grants a new one.
  Status RenewOwnLease();
  // Keeps the lease alive every third of its TTL until stopped; on_lost when it is gone.
  void KeepAliveLoop();

  EtcdClient& client_;
  const std::string me_;
  const std::string key_;
  const int lease_seconds_;
  int64_t lease_ = 0;
  // When the last keep-alive etcd answered was sent (or the lease granted): the lease runs from
  // there. The campaign's thread, then the keeper's.
  std::chrono::steady_clock::time_point kept_;
  std::function<void(const std::string&)> on_lost_;
  std::thread keeper_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
};

}  // namespace moe::controller
