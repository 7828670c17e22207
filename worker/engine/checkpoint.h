// Durable, sharded training checkpoints.
//
// <dir>/step_00000030/ holds one shard per writing rank (rank 0: dense weights, their AdamW moments
// and the router biases; ranks 0..EP-1: their experts) and MANIFEST.json. A checkpoint is built in
// step_XXXXXXXX.tmp/, every file fsynced, the manifest written last, then the directory is renamed into
// place: a directory named step_* is complete. Each shard ends with a CRC-32 of its bytes, so a damaged
// or truncated shard is detected on load; the loader then says so and falls back to the previous
// complete checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/yaml.h"
#include "worker/engine/comm/communicator.h"
#include "worker/engine/model.h"

namespace moe {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  Node state;  // the manifest's "state" (data position, rng, ...)
};

class CheckpointManager {
 public:
  CheckpointManager(std::string dir, const ParallelContext& par, std::string fingerprint, int64_t keep_last);

  // Collective: every rank of the job calls it at the same step.
  Status Save(int64_t step, Model& model, const Node& state);
  // Collective: finds the newest complete, undamaged checkpoint (rank 0 decides, everyone follows) and
  // loads this rank's part. Returns step 0 when there is none. A checkpoint written for another model
  // shape or layout is an error (FAILED_PRECONDITION), not something to skip.
  StatusOr<CheckpointInfo> Restore(Model& model);

  // Checks one checkpoint directory's manifest and every shard; OK means it can be loaded.
  Status Validate(const std::string& path) const;
  // Complete checkpoint directories, newest first.
  std::vector<std::pair<int64_t, std::string>> List() const;
  static std::string StepDirName(int64_t step);

 private:
  Status WriteShard(const std::string& path, int64_t step, Model& model) const;
  Status LoadShard(const std::string& path, Model& model, bool dense, bool experts) const;
  bool WritesShard() const { return par_.rank < par_.expert_parallel; }  // first EP group

  std::string dir_;
  ParallelContext par_;
  std::string fingerprint_;
  int64_t keep_last_;
};

}  // namespace moe
