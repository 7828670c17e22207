// A StateStore in memory whose writes fail on demand (UNAVAILABLE, as a full disk or a lost volume
// would), to show that a refused write leaves the controller's memory as it was.
#pragma once

#include <atomic>
#include <functional>

#include "controller/state_store.h"

namespace moe::controller {

class FlakyStateStore final : public StateStore {
 public:
  std::atomic<bool> fail_writes{false};  // set by the test, read by the controller's writer thread
  std::atomic<int> refused{0};           // writes refused so far
  std::atomic<int> batches{0};           // transactions the controller's writer opened (Batch)

  Status Batch(const std::function<Status()>& writes) override {
    ++batches;
    return writes();
  }

  Status PutJob(const moe::v1::Job& job) override {
    if (fail_writes) return Refuse();
    return memory_.PutJob(job);
  }
  Status AppendEvent(const moe::v1::JobEvent& event) override {
    if (fail_writes) return Refuse();
    return memory_.AppendEvent(event);
  }
  Status PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) override {
    if (fail_writes) return Refuse();
    return memory_.PutJobWithEvent(job, event);
  }
  StatusOr<std::vector<moe::v1::Job>> LoadJobs() override { return memory_.LoadJobs(); }
  StatusOr<std::vector<moe::v1::JobEvent>> LoadEvents(const std::string& job_id) override {
    return memory_.LoadEvents(job_id);
  }
  Status DeleteJob(const std::string& job_id) override {
    if (fail_writes) return Refuse();
    return memory_.DeleteJob(job_id);
  }
  Status PutWorker(const moe::v1::Worker& info, const std::string& session) override {
    if (fail_writes) return Refuse();
    return memory_.PutWorker(info, session);
  }
  StatusOr<std::vector<StoredWorker>> LoadWorkers() override { return memory_.LoadWorkers(); }
  Status DeleteWorker(const std::string& name) override {
    if (fail_writes) return Refuse();
    return memory_.DeleteWorker(name);
  }
  Status PutNodeCredential(const moe::v1::NodeCredential& c) override {
    if (fail_writes) return Refuse();
    return memory_.PutNodeCredential(c);
  }
  StatusOr<std::vector<moe::v1::NodeCredential>> LoadNodeCredentials() override {
    return memory_.LoadNodeCredentials();
  }
  Status DeleteNodeCredential(const std::string& sha256) override {
    if (fail_writes) return Refuse();
    return memory_.DeleteNodeCredential(sha256);
  }
  StatusOr<int64_t> NextEpoch() override { return memory_.NextEpoch(); }
  StatusOr<int64_t> StoredEpoch() override { return memory_.StoredEpoch(); }
  void SetStoredEpoch(int64_t e) { memory_.SetStoredEpoch(e); }

 private:
  Status Refuse() {
    ++refused;
    return UnavailableError("state store: disk full (test)");
  }
  MemoryStateStore memory_;
};

}  // namespace moe::controller
