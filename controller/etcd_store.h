// The controller's durable state in etcd v3 (--store etcd://...): the same records as the SQLite
// store (state_store.h), under one key prefix, so that any controller on the same etcd can take
// over (leader_election.h). Records are the protobuf messages, binary:
//
//   <prefix>/jobs/<id>                      moe.v1.Job (without its events)
//   <prefix>/events/<job id>/<seq, 20 digits>  moe.v1.JobEvent
//   <prefix>/workers/<name>                 "<session length>:<session>" + moe.v1.Worker
//   <prefix>/credentials/<sha256>           moe.v1.NodeCredential
//   <prefix>/epoch                          the fencing epoch, decimal
//   <prefix>/leader                         the leader's address, on its lease (leader_election.h)
//
//   <prefix>/commits                        its version counts the writes committed (Commit)
//
// Fencing: every write is one etcd transaction whose guard is the leader key's creation revision
// (the fence this controller won). A controller whose lease ran out (stalled, partitioned, paused)
// finds the key gone or created by another: its write is refused, nothing of it stored, and the
// store says so (FAILED_PRECONDITION, fenced()). A batch (GroupCommitStore) is one transaction, and
// each is applied exactly once, an answer lost on the way included (Commit).
// Thread-safety: the writes come from one thread (GroupCommitStore's writer) or the caller's; reads
// from any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "controller/etcd_client.h"
#include "controller/state_store.h"

namespace moe::controller {

// What a write must find to be stored: `key` still there, created at `revision`.
struct EtcdFence {
  std::string key;
  int64_t revision = 0;
};

// A batch's operations as one transaction may hold them (etcd refuses a key written twice).
std::vector<etcdserverpb::RequestOp> MergeOps(const std::vector<etcdserverpb::RequestOp>& ops);

class EtcdStateStore final : public StateStore {
 public:
  // etcd refuses a transaction of more operations than its --max-txn-ops (128 by default); the
  // controller's batches stay within this many writes (docs/operations.md: etcd is to be run with
  // --max-txn-ops 10000 or more, as deploy/ does).
  static constexpr size_t kMaxBatchWrites = 256;
  // A write's try on one member, and all its tries: an unsettled write after that stops the
  // controller (Commit).
  static constexpr double kWriteTrySeconds = 1.0;
  static constexpr double kWriteSeconds = 10.0;

  EtcdStateStore(EtcdClient& client, EtcdFence fence);

  Status PutJob(const moe::v1::Job& job) override;
  Status AppendEvent(const moe::v1::JobEvent& event) override;
  Status PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) override;
  StatusOr<std::vector<moe::v1::Job>> LoadJobs() override;
  StatusOr<std::vector<moe::v1::JobEvent>> LoadEvents(const std::string& job_id) override;
  Status DeleteJob(const std::string& job_id) override;
  Status PutWorker(const moe::v1::Worker& info, const std::string& session) override;
  StatusOr<std::vector<StoredWorker>> LoadWorkers() override;
  Status DeleteWorker(const std::string& name) override;
  Status PutNodeCredential(const moe::v1::NodeCredential& c) override;
  StatusOr<std::vector<moe::v1::NodeCredential>> LoadNodeCredentials() override;
  Status DeleteNodeCredential(const std::string& sha256) override;
  StatusOr<int64_t> NextEpoch() override;
  StatusOr<int64_t> StoredEpoch() override;
  Status Batch(const std::function<Status()>& writes) override;
  size_t MaxBatchWrites() const override { return kMaxBatchWrites; }

  // Why a write was refused for the fence ("" while this controller leads).
  std::string fenced() const;

 private:
  std::string Key(const std::string& kind, const std::string& name) const;
  // Stores the operations in one fenced transaction, or adds them to the open batch's.
  Status Write(std::vector<etcdserverpb::RequestOp> ops);
  Status Commit(const std::vector<etcdserverpb::RequestOp>& ops);
  struct Standing {
    bool leads = false;   // the leader key is still the one this controller created
    int64_t commits = 0;  // writes committed (the count key's version)
  };
  StatusOr<Standing> ReadStanding();
  // The transaction of `ops`: the fence, the commit count, the merged operations, the count's put.
  etcdserverpb::TxnRequest Guarded(const std::vector<etcdserverpb::RequestOp>& ops) const;
  std::string CommitsKey() const { return prefix_ + "/commits"; }
  std::string FenceMessage() const;
  Status Fenced(const std::string& why);  // records why (fenced()) and returns it
  // Every key under `prefix`, in key order (paged).
  StatusOr<std::vector<mvccpb::KeyValue>> Scan(const std::string& prefix);

  EtcdClient& client_;
  const EtcdFence fence_;
  const std::string prefix_;
  bool in_batch_ = false;  // the writer's thread alone
  std::vector<etcdserverpb::RequestOp> batch_;
  int64_t commits_ = -1;  // the writer's thread alone; -1 until read at the first write
  mutable std::mutex mu_;
  std::string fenced_;  // guarded by mu_
};

}  // namespace moe::controller
