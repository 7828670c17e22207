// Durable training checkpoints that move between layouts (the on-disk form: checkpoint_io.h).
//
// <dir>/step_00000030/ holds MANIFEST.json and one shard per writing rank: rank 0 writes the dense
// weights, their AdamW moments and the router biases; the ranks of the first expert-parallel group
// their experts. Every tensor is stored by its global shape, so any layout can read it back. A
// checkpoint is built in step_XXXXXXXX.tmp/, every file fsynced, the manifest written last, then
// the directory is renamed into place: a directory named step_* is complete. Each shard ends with a
// CRC-32 of its bytes, so a damaged or truncated shard is detected on load; the loader then says so
// and falls back to the previous complete checkpoint. A checkpoint of another model shape is
// refused.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/yaml.h"
#include "worker/engine/checkpoint/checkpoint_io.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::checkpoint {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  Node state;  // the manifest's "state" (data position, rng, ...)
};

// What this rank writes (owner) or needs (reader) of a model's state in a checkpoint: every
// parameter's value and AdamW moments ("param/<name>/value|m|v") and every MoE layer's bias
// ("bias/<layer>"), as pieces of the global tensors.
std::vector<TensorPiece> CheckpointPieces(model::Model& model,
                                          const CheckpointedOptimizer& optimizer,
                                          const parallel::ParallelContext& par, bool writer);

class CheckpointManager {
 public:
  // `fingerprint`: what a checkpoint must agree with (the model's shape, ModelFingerprint); `spec`:
  // the job document stored in the manifest (moe-export reads the model from it).
  // `tmp_suffix`: what a save in progress is called after its step's name (".tmp"; an attempt's
  // own,
  // ".tmp-a3", so that two attempts never write into one).
  CheckpointManager(std::string dir, const parallel::ParallelContext& par, std::string fingerprint,
                    int64_t keep_last, Node spec = Node(), std::string tmp_suffix = ".tmp");
  // Runs a save's commit and the pruning of old ones (rank 0) while this rank still holds the
  // directory (checkpoint/ownership.h WhileHeld: checked and kept held under the owner lock); a
  // non-OK answer (this rank was fenced off) stops the save there, committing and deleting nothing.
  using Fence = std::function<Status(const std::function<Status()>& commit)>;
  void SetFence(Fence fence) { fence_ = std::move(fence); }
  // Who writes (the job's attempt), recorded in each manifest as "writer".
  void SetWriter(std::string writer) { writer_ = std::move(writer); }
  // The directory the checkpoints are read and written through (set again after it was reopened).
  const std::string& dir() const { return dir_; }
  void SetDir(std::string dir) { dir_ = std::move(dir); }
  // The path messages name it by when dir() is a descriptor's (/proc/self/fd/N).
  void SetShownName(std::string shown) { shown_ = std::move(shown); }

  // Collective: every rank of the job calls it at the same step. A rank that cannot write its part
  // (storage full, unwritable, gone) makes every rank give up this checkpoint together, never
  // leaving its peers waiting in a barrier: with `storage_failure` the reason lands there and Save
  // returns OK (the caller may train on and try again at the next interval); without it Save
  // returns the reason. What was half written is removed; the previous complete checkpoint stays. A
  // communication failure is always returned.
  Status Save(int64_t step, model::Model& model, const CheckpointedOptimizer& optimizer,
              const Node& state, Status* storage_failure = nullptr);
  // Save in its phases, for a caller that writes this rank's shard itself, later or elsewhere
  // (AsyncCheckpointer: a background thread). BeginSave: rank 0 prepares the save's temporary
  // directory and every rank learns whether it could (`prepared`); a communication failure is
  // returned. ShardPath: where this rank's shard of that save goes. EndSave, once this rank's
  // shard is durable (`wrote`: its outcome): every rank learns whether all of them wrote theirs,
  // then rank 0 commits (the manifest last, the rename); the answers are Save's. All three use
  // dir() as it is when called: a caller keeps it unchanged between BeginSave and EndSave.
  Status BeginSave(int64_t step, Status* prepared);
  std::string ShardPath(int64_t step) const;
  Status EndSave(int64_t step, const CheckpointedOptimizer& optimizer, const Node& state,
                 const Status& prepared, const Status& wrote, Status* storage_failure = nullptr);
  // Collective: the step of the newest complete, undamaged checkpoint (rank 0 decides, everyone
  // follows); 0 when there is none. A checkpoint written for another model shape is an error
  // (FAILED_PRECONDITION), not something to skip.
  StatusOr<int64_t> Choose();
  // Loads this rank's part of checkpoint `step`, whatever layout wrote it.
  StatusOr<CheckpointInfo> Load(int64_t step, model::Model& model,
                                CheckpointedOptimizer& optimizer);
  // Choose, then Load (step 0 when there is nothing to load).
  StatusOr<CheckpointInfo> Restore(model::Model& model, CheckpointedOptimizer& optimizer);

  // Checks one checkpoint directory's manifest and every shard; OK means it can be loaded.
  Status Validate(const std::string& path) const;
  // Complete checkpoint directories, newest first.
  std::vector<std::pair<int64_t, std::string>> List() const;
  // Removes the saves in progress of other writers (step_N.tmp, step_N.tmp-aK but this manager's
  // own suffix): left by an attempt that was killed or fenced mid-save, they were never removed.
  // Only the directory's owner calls it (the lead rank, right after its claim: ownership.h), when
  // any older attempt is fenced off. Returns how many it removed.
  int RemoveStaleSaves() const;
  static std::string StepDirName(int64_t step);

 private:
  static constexpr int64_t kOtherModel = -1, kUnreadable = -2;  // ChooseOnRankZero's refusals
  int64_t ChooseOnRankZero(Status* refusal) const;
  Status PrepareSave(const std::string& tmp_dir) const;
  Status CommitSave(int64_t step, const CheckpointedOptimizer& optimizer, const Node& state,
                    const std::string& tmp_dir, const std::string& final_dir) const;

  std::string dir_;
  parallel::ParallelContext par_;
  std::string fingerprint_;
  int64_t keep_last_;
  Node spec_;
  std::string tmp_suffix_;
  Fence fence_;
  std::string writer_;
  std::string shown_;
  std::string Shown(const std::string& path) const;  // `path` with dir() said as the shown name
};

// The newest complete checkpoint directory in `dir` (NOT_FOUND when there is none).
StatusOr<std::string> LatestCheckpoint(const std::string& dir);

}  // namespace moe::checkpoint
