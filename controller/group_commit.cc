#include "controller/group_commit.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "common/log.h"

namespace moe::controller {

GroupCommitStore::GroupCommitStore(StateStore& durable) : durable_(durable) {
  if (const char* d = std::getenv("MOE_TEST_STORE_COMMIT_DELAY_MS"); d != nullptr && *d != 0) {
    commit_delay_ = std::atof(d) / 1000.0;
  }
  writer_ = std::thread([this] { Run(); });
}

GroupCommitStore::~GroupCommitStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_.notify_all();
  writer_.join();
}

// Blocking with the controller's lock released is the point of this class: the analysis cannot
// follow a lock given up and taken back inside a call.
Status GroupCommitStore::Commit(std::function<Status(StateStore&)> apply)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  auto result = std::make_shared<Status>(InternalError("not committed"));
  auto done = std::make_shared<bool>(false);
  std::condition_variable wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Write{std::move(apply), result, done, &wake});
  }
  queued_.notify_one();
  if (caller_lock_ != nullptr) caller_lock_->Unlock();
  {
    std::unique_lock<std::mutex> lock(mu_);
    wake.wait(lock, [&] { return *done; });
  }
  if (caller_lock_ != nullptr) caller_lock_->Lock();
  return *result;
}

void GroupCommitStore::PutJobLater(const moe::v1::Job& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Write{[job](StateStore& s) { return s.PutJob(job); }, nullptr, nullptr});
  }
  queued_.notify_one();
}

void GroupCommitStore::Run() {
  while (true) {
    std::deque<Write> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is committed
      const size_t most = std::min(kMaxBatch, durable_.MaxBatchWrites());
      while (!queue_.empty() && batch.size() < most) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    CommitBatch(batch);
  }
}

// One transaction for the batch. When it fails and carried telemetry, the waited-for writes are
// tried again alone: a failing metrics record must not refuse a submit; their own failure is
// theirs.
void GroupCommitStore::CommitBatch(std::deque<Write>& batch) {
  if (commit_delay_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(commit_delay_));
  const auto commit = [&](bool with_telemetry) {
    return durable_.Batch([&]() -> Status {
      for (Write& w : batch) {
        if (w.result || with_telemetry) MOE_RETURN_IF_ERROR(w.apply(durable_));
      }
      return OkStatus();
    });
  };
  bool telemetry = false;
  for (const Write& w : batch) telemetry |= !w.result;
  Status st = commit(true);
  if (!st.ok() && telemetry) {
    MOE_LOG(WARNING) << "state store: a batch with telemetry failed (" << st
                     << "); the metrics records in it are dropped";
    st = commit(false);
  }
  batches_.fetch_add(1);
  writes_.fetch_add(static_cast<int64_t>(batch.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Write& w : batch) {
      if (!w.result) continue;
      *w.result = st;
      *w.done = true;
      w.wake->notify_one();  // under mu_: the caller's variable lives until it saw `done`
    }
  }
}

Status GroupCommitStore::PutJob(const moe::v1::Job& job) {
  return Commit([&job](StateStore& s) { return s.PutJob(job); });
}
Status GroupCommitStore::AppendEvent(const moe::v1::JobEvent& event) {
  return Commit([&event](StateStore& s) { return s.AppendEvent(event); });
}
Status GroupCommitStore::PutJobWithEvent(const moe::v1::Job& job, const moe::v1::JobEvent& event) {
  return Commit([&](StateStore& s) { return s.PutJobWithEvent(job, event); });
}
Status GroupCommitStore::PutJobsWithEvents(const std::vector<JobWithEvent>& all) {
  return Commit([&all](StateStore& s) -> Status {
    for (const JobWithEvent& w : all) MOE_RETURN_IF_ERROR(s.PutJobWithEvent(w.job, w.event));
    return OkStatus();
  });
}
Status GroupCommitStore::DeleteJob(const std::string& job_id) {
  return Commit([&job_id](StateStore& s) { return s.DeleteJob(job_id); });
}
Status GroupCommitStore::PutWorker(const moe::v1::Worker& info, const std::string& session) {
  return Commit([&](StateStore& s) { return s.PutWorker(info, session); });
}
Status GroupCommitStore::PutWorkers(const std::vector<moe::v1::Worker>& infos,
                                    const std::string& session) {
  return Commit([&](StateStore& s) -> Status {
    for (const auto& info : infos) MOE_RETURN_IF_ERROR(s.PutWorker(info, session));
    return OkStatus();
  });
}
Status GroupCommitStore::DeleteWorker(const std::string& name) {
  return Commit([&name](StateStore& s) { return s.DeleteWorker(name); });
}

Status GroupCommitStore::DeleteWorkers(const std::vector<std::string>& names) {
  return Commit([&names](StateStore& s) -> Status {
    for (const auto& n : names) MOE_RETURN_IF_ERROR(s.DeleteWorker(n));
    return OkStatus();
  });
}
Status GroupCommitStore::PutNodeCredential(const moe::v1::NodeCredential& c) {
  return Commit([&c](StateStore& s) { return s.PutNodeCredential(c); });
}
Status GroupCommitStore::DeleteNodeCredential(const std::string& sha256) {
  return Commit([&sha256](StateStore& s) { return s.DeleteNodeCredential(sha256); });
}

StatusOr<int64_t> GroupCommitStore::NextEpoch() {
  int64_t epoch = 0;
  MOE_RETURN_IF_ERROR(Commit([&epoch](StateStore& s) -> Status {
    MOE_ASSIGN_OR_RETURN(epoch, s.NextEpoch());
    return OkStatus();
  }));
  return epoch;
}

}  // namespace moe::controller
