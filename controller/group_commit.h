// The controller's one writer: every change that must be durable before it is acknowledged is
// queued here and committed with others in a batch, one transaction and one fsync per batch, by one
// thread, outside the controller's lock (docs/architecture.md, "The write path").
//
//   caller (controller lock held)        writer thread
//   ─ stages its write, queues it ──▶    takes every queued write (up to kMaxBatch)
//   ─ releases the lock, waits           BEGIN; the writes in order; COMMIT (fsync)
//   ◀─ the batch's status ─────────────  wakes the batch's callers
//   ─ takes the lock back, applies the change in memory, then acts on it (a worker told, ...)
//
// So an RPC is answered when its change is on disk, a change the store refuses changes nothing in
// memory, and readers (who take the lock briefly) only ever see what is durable. While a caller
// waits, other callers run and queue their own writes (submits, which take the lock alone; the one
// change under way, Controller::op_mu_): that is what fills the batches. Telemetry (a running job's
// metrics every few seconds) is queued without waiting (PutJobLater): it joins the batches and
// costs no transaction of its own.
//
// Thread-safety: the writes may come from any thread; a caller that holds the lock set by
// SetCallerLock must hold it (it is released while waiting), others must not.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/mutex.h"
#include "controller/state_store.h"

namespace moe::controller {

class GroupCommitStore final : public StateStore {
 public:
  static constexpr size_t kMaxBatch = 4096;
  // Writes go to `durable` (its Batch: one transaction), reads straight to it.
  explicit GroupCommitStore(StateStore& durable);
  ~GroupCommitStore() override;  // commits what is queued, then stops the writer

  // The lock callers hold when they write (the controller's): released while they wait for their
  // batch, taken back before the write returns. Set once, before any write.
  void SetCallerLock(Mutex* mu) { caller_lock_ = mu; }
  // Batches committed and writes in them since the start (for the benchmark and /metrics).
  int64_t batches() const { return batches_.load(); }
  int64_t writes() const { return writes_.load(); }

  // Durable writes: each returns once its batch is committed, with the batch's status.
  Status PutJob(const moe::v1::Job& job) override;
  Status AppendEvent(const moe::v1::JobEvent& event) override;
  Status PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) override;
  // One write however many: they share its batch's transaction (all or none).
  Status PutJobsWithEvents(const std::vector<JobWithEvent>& all) override;
  Status DeleteJob(const std::string& job_id) override;
  Status PutWorker(const moe::v1::Worker& info, const std::string& session) override;
  Status DeleteWorker(const std::string& name) override;
  Status PutNodeCredential(const moe::v1::NodeCredential& c) override;
  Status DeleteNodeCredential(const std::string& sha256) override;
  // Workers forgotten together, in one write.
  Status DeleteWorkers(const std::vector<std::string>& names);
  // A node agent's devices, in the one write (one batch, however many devices).
  Status PutWorkers(const std::vector<moe::v1::Worker>& infos, const std::string& session);
  // Telemetry: queued for the next batch, not waited for; a failure is logged (the next save
  // replaces it).
  void PutJobLater(const moe::v1::Job& job);

  // Reads and the epoch go to the durable store as they are (its reader does not wait for the
  // writer).
  StatusOr<std::vector<moe::v1::Job>> LoadJobs() override { return durable_.LoadJobs(); }
  StatusOr<std::vector<moe::v1::JobEvent>> LoadEvents(const std::string& id) override {
    return durable_.LoadEvents(id);
  }
  StatusOr<std::vector<StoredWorker>> LoadWorkers() override { return durable_.LoadWorkers(); }
  StatusOr<std::vector<moe::v1::NodeCredential>> LoadNodeCredentials() override {
    return durable_.LoadNodeCredentials();
  }
  StatusOr<int64_t> NextEpoch() override;
  StatusOr<int64_t> StoredEpoch() override { return durable_.StoredEpoch(); }

 private:
  struct Write {
    std::function<Status(StateStore&)> apply;
    std::shared_ptr<Status> result;  // null: nobody waits (telemetry)
    std::shared_ptr<bool> done;      // set with the result, under mu_
    // The waiting caller's own: a batch wakes its callers alone, not every caller waiting for a
    // later batch (two dozen threads woken per commit, each to sleep again, was a tenth of the
    // controller's time in context switches under bench/load.py's submits).
    std::condition_variable* wake = nullptr;
  };
  Status Commit(std::function<Status(StateStore&)> apply);
  void Run();  // the writer thread
  void CommitBatch(std::deque<Write>& batch);

  StateStore& durable_;
  Mutex* caller_lock_ = nullptr;
  std::mutex mu_;                   // the queue and the results
  std::condition_variable queued_;  // the writer: something to commit
  std::deque<Write> queue_;
  bool stop_ = false;
  std::atomic<int64_t> batches_{0}, writes_{0};
  double commit_delay_ = 0;  // test hook: $MOE_TEST_STORE_COMMIT_DELAY_MS, slept in every commit
  std::thread writer_;
};

}  // namespace moe::controller
