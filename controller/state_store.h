// Durable controller state: jobs, their events, and worker sessions. The interface knows nothing of
// SQLite so tests and managers can use any implementation; SqliteStateStore is the real one (WAL,
// synchronous=FULL: a job the controller acknowledged survives a crash of the controller or the
// machine).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "moe/v1/job.pb.h"
#include "moe/v1/worker_service.pb.h"

namespace moe::controller {

// A worker's name and the session that holds it (worker_registry.h), kept so that after a
// controller restart only that worker can come back under its name.
struct StoredWorker {
  moe::v1::Worker info;
  std::string session;
};

// A transition's record and its event (PutJobsWithEvents).
struct JobWithEvent {
  moe::v1::Job job;
  moe::v1::JobEvent event;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Inserts or replaces the job (without its events).
  virtual Status PutJob(const moe::v1::Job& job) = 0;
  virtual Status AppendEvent(const moe::v1::JobEvent& event) = 0;
  // A transition: the job's new record and the event that explains it, both stored or neither.
  virtual Status PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) = 0;
  virtual StatusOr<std::vector<moe::v1::Job>> LoadJobs() = 0;
  virtual StatusOr<std::vector<moe::v1::JobEvent>> LoadEvents(const std::string& job_id) = 0;
  // Removes the job and its events, both or neither.
  virtual Status DeleteJob(const std::string& job_id) = 0;
  virtual Status PutWorker(const moe::v1::Worker& info, const std::string& session) = 0;
  virtual StatusOr<std::vector<StoredWorker>> LoadWorkers() = 0;
  // Forgets a worker (it left cleanly, was deleted, or was lost too long): its name is free again.
  virtual Status DeleteWorker(const std::string& name) = 0;
  // Node credentials (node_credentials.h), by their SHA-256: issued, revoked (kept, so that its
  // agent is told), dropped.
  virtual Status PutNodeCredential(const moe::v1::NodeCredential& c) = 0;
  virtual StatusOr<std::vector<moe::v1::NodeCredential>> LoadNodeCredentials() = 0;
  virtual Status DeleteNodeCredential(const std::string& sha256) = 0;
  // The fencing epoch: one more at every controller start (NextEpoch, stored before it serves), and
  // what is stored now (a controller that finds a higher one than its own is stale and stops).
  virtual StatusOr<int64_t> NextEpoch() = 0;
  virtual StatusOr<int64_t> StoredEpoch() = 0;
  // Runs `writes` (calls of the methods above) as one transaction: all stored, with one fsync, or
  // none (GroupCommitStore's batches). The default runs them as they come (stores without
  // transactions: tests).
  virtual Status Batch(const std::function<Status()>& writes) { return writes(); }
  // The most writes one Batch may hold (GroupCommitStore closes its batches there): etcd refuses
  // transactions past a size.
  virtual size_t MaxBatchWrites() const { return 4096; }
  // Several transitions (a scheduling pass's placements) in one write: all stored or none.
  virtual Status PutJobsWithEvents(const std::vector<JobWithEvent>& all) {
    return Batch([&]() -> Status {
      for (const JobWithEvent& w : all) MOE_RETURN_IF_ERROR(PutJobWithEvent(w.job, w.event));
      return OkStatus();
    });
  }
};

class StmtCache;        // state_store.cc
class WalCheckpointer;  // state_store.cc

class SqliteStateStore final : public StateStore {
 public:
  // Opens (creating) <dir>/controller.db.
  static StatusOr<std::unique_ptr<SqliteStateStore>> Open(const std::string& dir);
  ~SqliteStateStore() override;
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

 private:
  static constexpr int64_t kApplicationId = 0x4d6f4543;  // "MoEC": PRAGMA application_id
  explicit SqliteStateStore(void* db);
  // `body` in a transaction of its own, or in the batch's when one is open.
  Status Transaction(const std::function<Status()>& body);
  Status CheckIntegrity(const std::string& path);
  Status CheckOurs(const std::string& path);
  Status Exec(const std::string& sql);
  Status Step(const char* sql);  // one statement of no rows, from the writer's cache
  Status StartCheckpointer(const std::string& path);
  // The test hook for a full disk where tests cannot mount a small file system: when the file named
  // by $MOE_TEST_STORE_FULL_IF exists, every write fails as SQLite's SQLITE_FULL would.
  static Status CheckWritable();
  void* db_;  // sqlite3*: the writes (one writer: GroupCommitStore's thread, or the caller's)
  // A second connection for the reads (LoadEvents, LoadJobs, LoadWorkers): in WAL mode it reads the
  // last committed state while a commit is under way, so a read never waits for the writer's fsync.
  void* reader_ = nullptr;
  std::mutex reader_mu_;
  std::unique_ptr<StmtCache> writes_, reads_;  // each connection's prepared statements
  std::unique_ptr<WalCheckpointer> checkpointer_;
  bool in_batch_ = false;  // a Batch is open on db_
};

// For tests: keeps everything in memory.
class MemoryStateStore final : public StateStore {
 public:
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
  StatusOr<int64_t> NextEpoch() override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return ++epoch_;
  }
  StatusOr<int64_t> StoredEpoch() override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return epoch_;
  }
  void SetStoredEpoch(int64_t e) {  // tests: another controller took over
    std::lock_guard<std::recursive_mutex> lock(mu_);
    epoch_ = e;
  }

 private:
  std::recursive_mutex mu_;  // the one writer's thread and the readers
  int64_t epoch_ = 0;
  std::map<std::string, StoredWorker> workers_;  // by name (LoadWorkers in name order, as SQLite's)
  std::vector<moe::v1::NodeCredential> credentials_;
  std::vector<moe::v1::Job> jobs_;
  std::vector<moe::v1::JobEvent> events_;
};

}  // namespace moe::controller
