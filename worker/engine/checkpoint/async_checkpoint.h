// Asynchronous checkpoints (checkpoint.async): the save's stall is a copy to host memory.
//
// At a step boundary Start prepares the save (CheckpointManager::BeginSave, collective), copies
// every tensor this rank writes into host buffers the checkpointer owns (one arena, reused between
// saves; pinned when the model is on a GPU) and hands them to ONE background thread, which streams
// the shard into step_XXXXXXXX.tmp/ and fsyncs it while training goes on. The background thread
// makes no collective call: at each later step boundary the training thread asks Poll, which
// learns with a one-number all-reduce whether every rank's write is durable; once all are,
// EndSave agrees on the outcome and rank 0 commits (manifest last, rename), as the synchronous
// path does. A write error on any rank abandons that checkpoint on every rank together (the
// previous complete one stays the newest); a process killed during the write leaves only a .tmp
// directory, which a resume ignores. At most one save is in flight: the caller Polls with `wait`
// before starting the next.
//
// Test hook: MOE_TEST_CHECKPOINT_WRITE_FAULT=kill:<step>[:<rank>] makes the writer SIGKILL its
// process after the first chunk of that step's shard (kill -9 mid-write), error:<step>[:<rank>]
// fail it there (every rank's writer, or only `rank`'s).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/yaml.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/checkpoint_io.h"

namespace moe::checkpoint {

class AsyncCheckpointer {
 public:
  AsyncCheckpointer(CheckpointManager* manager, const parallel::ParallelContext& par);
  // Waits for a write in flight; an uncommitted save stays uncommitted (a .tmp directory).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Allocates (and touches) the host buffers a save of this state needs, before training starts,
  // so that the first save's copy does not pay for them. Optional: Start allocates what is missing.
  void Preallocate(model::Model& model, const CheckpointedOptimizer& optimizer);

  bool in_flight() const { return pending_.has_value(); }
  int64_t in_flight_step() const { return pending_ ? pending_->step : 0; }

  // Collective, at a step boundary with no save in flight: prepares the save of `step`, copies
  // this rank's state to host memory and starts the background write. A directory that cannot be
  // prepared is a storage failure (in `storage_failure`; nothing is then in flight); a
  // communication failure is returned.
  Status Start(int64_t step, model::Model& model, const CheckpointedOptimizer& optimizer,
               const Node& state, Status* storage_failure);

  enum class Outcome { kNone, kPending, kCommitted, kFailed };
  // Collective, at every step boundary while a save is in flight (every rank calls it at the same
  // ones, with the same `wait`): kPending while some rank's write runs on; with `wait` this rank
  // waits for its own first (then every rank's is done). Once all are: EndSave, kCommitted, or
  // kFailed with the reason in `storage_failure`. A communication failure or a fenced rank's
  // ABORTED is returned. kNone: nothing was in flight.
  StatusOr<Outcome> Poll(bool wait, const CheckpointedOptimizer& optimizer,
                         Status* storage_failure);

  // Whether this rank's background write has finished (its outcome is then waiting for Poll).
  bool write_done();
  // The last finished save's background write, and the bytes this rank wrote there.
  double last_write_seconds() const { return last_write_seconds_; }
  size_t last_bytes() const { return last_bytes_; }

 private:
  struct Pending {
    int64_t step = 0;
    Node state;
    Status prepared;
  };
  void Snapshot(model::Model& model, const CheckpointedOptimizer& optimizer);
  void Reserve(size_t bytes, bool device_tensors);
  void FreeArena();
  void WriterLoop();
  Status Write(const std::string& path, int64_t step);
  Status WaitForWriter();  // this rank's write's outcome, once it is done

  CheckpointManager* manager_;
  parallel::ParallelContext par_;
  char* arena_ = nullptr;
  size_t capacity_ = 0;
  bool pinned_ = false;
  std::vector<HostPiece> pieces_;
  std::optional<Pending> pending_;
  // The writer thread and its one job.
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool job_ = false, done_ = false, quit_ = false;
  std::string job_path_;
  int64_t job_step_ = 0;
  Status wrote_;
  double write_seconds_ = 0, last_write_seconds_ = 0;
  size_t last_bytes_ = 0;
};

}  // namespace moe::checkpoint
