#include "worker/engine/checkpoint/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "common/log.h"

namespace moe::checkpoint {
namespace {

std::string ShardName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard_%05d.bin", rank);
  return buf;
}

}  // namespace

std::vector<TensorPiece> CheckpointPieces(model::Model& model,
                                          const CheckpointedOptimizer& optimizer,
                                          const parallel::ParallelContext& par, bool writer) {
  // Weights and moments: the optimizer knows who holds what (shards, or the group's rank 0). The
  // bias of a MoE layer is the same on every data-parallel rank of its stage: rank 0 of the stage
  // writes it.
  std::vector<TensorPiece> out;
  optimizer.Pieces(writer, &out);
  if (writer && par.dp_rank() != 0) return out;
  const int64_t e = model.config().moe.num_experts;
  for (model::MoeLayer* l : model.moe_layers())
    out.push_back({"bias/" + l->name(), {e}, 0, l->bias()});
  return out;
}

CheckpointManager::CheckpointManager(std::string dir, const parallel::ParallelContext& par,
                                     std::string fingerprint, int64_t keep_last, Node spec,
                                     std::string tmp_suffix)
    : dir_(std::move(dir)),
      par_(par),
      fingerprint_(std::move(fingerprint)),
      keep_last_(keep_last),
      spec_(std::move(spec)),
      tmp_suffix_(std::move(tmp_suffix)) {}

std::string CheckpointManager::Shown(const std::string& path) const {
  if (shown_.empty() || path.compare(0, dir_.size(), dir_) != 0) return path;
  return shown_ + path.substr(dir_.size());
}

std::string CheckpointManager::StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

namespace {

// Every rank learns whether all of them succeeded at a phase of a save (an all-reduce of failures):
// OK, this rank's own storage error, or a sentence about another rank's. A failing collective is
// returned as it is, through `comm`.
Status AgreeOnSave(parallel::Communicator* world, const Status& mine, int64_t step, Status* comm) {
  double failed = mine.ok() ? 0.0 : 1.0;
  *comm = world->AllReduceSumHost(&failed, 1);
  if (!comm->ok() || failed == 0.0) return OkStatus();
  if (!mine.ok()) return mine;
  return UnavailableError("checkpoint at step " + std::to_string(step) + ": " +
                          std::to_string(static_cast<int>(failed)) +
                          " other rank(s) could not write their part (see their logs)");
}

}  // namespace

Status CheckpointManager::PrepareSave(const std::string& tmp_dir) const {
  MOE_RETURN_IF_ERROR(MakeDirs(dir_));
  MOE_RETURN_IF_ERROR(RemoveAll(tmp_dir));
  return MakeDirs(tmp_dir);
}

// Rank 0, once every shard is in tmp_dir: the manifest last, then the directory renamed into place.
// A checkpoint of the same step (a re-run after a resume) is replaced only now, when the new one is
// complete.
Status CheckpointManager::CommitSave(int64_t step, const CheckpointedOptimizer& optimizer,
                                     const Node& state, const std::string& tmp_dir,
                                     const std::string& final_dir) const {
  Node manifest = Node::Map();
  manifest.Set("format", Node::Scalar(kCheckpointFormat, true));
  manifest.Set("step", Node::Scalar(std::to_string(step)));
  manifest.Set("world_size", Node::Scalar(std::to_string(par_.world_size)));
  manifest.Set("expert_parallel", Node::Scalar(std::to_string(par_.expert_parallel)));
  manifest.Set("pipeline_parallel", Node::Scalar(std::to_string(par_.pipeline_parallel)));
  manifest.Set("distributed_optimizer", Node::Scalar(optimizer.distributed() ? "true" : "false"));
  manifest.Set("fingerprint", Node::Scalar(fingerprint_, true));
  manifest.Set("state", state);
  if (!spec_.IsNull()) manifest.Set("spec", spec_);
  if (!writer_.empty()) manifest.Set("writer", Node::Scalar(writer_, true));
  MOE_RETURN_IF_ERROR(
      WriteFileAtomic(JoinPath(tmp_dir, "MANIFEST.json"), ToJson(manifest, 2) + "\n"));
  const auto commit = [&]() -> Status {
    if (PathExists(final_dir)) MOE_RETURN_IF_ERROR(RemoveAll(final_dir));
    if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0)
      return ErrnoError("rename " + Shown(tmp_dir), errno);
    MOE_RETURN_IF_ERROR(FsyncPath(dir_));
    if (keep_last_ > 0) {
      auto all = List();
      for (size_t i = static_cast<size_t>(keep_last_); i < all.size(); ++i) {
        Status st = RemoveAll(all[i].second);
        if (!st.ok())
          MOE_LOG(WARNING) << "could not prune old checkpoint " << Shown(all[i].second) << ": "
                           << st;
      }
    }
    return OkStatus();
  };
  return fence_ ? fence_(commit) : commit();  // a fenced rank commits and prunes nothing
}

Status CheckpointManager::Save(int64_t step, model::Model& model,
                               const CheckpointedOptimizer& optimizer, const Node& state,
                               Status* storage_failure) {
  Status prepared;
  MOE_RETURN_IF_ERROR(BeginSave(step, &prepared));
  Status wrote = prepared;
  if (prepared.ok()) {
    const std::vector<TensorPiece> mine = CheckpointPieces(model, optimizer, par_, /*writer=*/true);
    wrote = mine.empty() ? OkStatus() : WriteShardFile(ShardPath(step), par_.rank, step, mine);
  }
  return EndSave(step, optimizer, state, prepared, wrote, storage_failure);
}

std::string CheckpointManager::ShardPath(int64_t step) const {
  return JoinPath(JoinPath(dir_, StepDirName(step)) + tmp_suffix_, ShardName(par_.rank));
}

Status CheckpointManager::BeginSave(int64_t step, Status* prepared) {
  const std::string tmp_dir = JoinPath(dir_, StepDirName(step)) + tmp_suffix_;
  parallel::Communicator* world = par_.world;
  world->SetPhase("checkpoint at step " + std::to_string(step));
  Status comm;
  *prepared = AgreeOnSave(world, par_.rank == 0 ? PrepareSave(tmp_dir) : OkStatus(), step, &comm);
  return comm;
}

Status CheckpointManager::EndSave(int64_t step, const CheckpointedOptimizer& optimizer,
                                  const Node& state, const Status& prepared, const Status& wrote,
                                  Status* storage_failure) {
  const std::string final_dir = JoinPath(dir_, StepDirName(step));
  const std::string tmp_dir = final_dir + tmp_suffix_;
  parallel::Communicator* world = par_.world;
  world->SetPhase("checkpoint at step " + std::to_string(step));
  Status comm, agreed = prepared;
  if (agreed.ok()) {
    agreed = AgreeOnSave(world, wrote, step, &comm);
    MOE_RETURN_IF_ERROR(comm);
  }
  if (agreed.ok()) {
    agreed = AgreeOnSave(
        world, par_.rank == 0 ? CommitSave(step, optimizer, state, tmp_dir, final_dir) : OkStatus(),
        step, &comm);
    MOE_RETURN_IF_ERROR(comm);
  }
  if (agreed.ok()) return OkStatus();
  if (par_.rank == 0) (void)RemoveAll(tmp_dir);  // best effort: the storage may be what failed
  // A fenced rank (a newer attempt holds the directory) stops: that is no storage failure to train
  // on past.
  if (storage_failure == nullptr || agreed.code() == StatusCode::kAborted) return agreed;
  *storage_failure = agreed;
  return OkStatus();
}

int CheckpointManager::RemoveStaleSaves() const {
  auto names = ListDir(dir_);
  if (!names.ok()) return 0;
  int removed = 0;
  for (const auto& n : *names) {
    // step_NNNNNNNN followed by a save-in-progress suffix that is not ours.
    if (n.size() <= 13 || n.rfind("step_", 0) != 0 || n.compare(13, 4, ".tmp") != 0) continue;
    if (n.substr(13) == tmp_suffix_) continue;
    if (Status st = RemoveAll(JoinPath(dir_, n)); st.ok()) {
      ++removed;
    } else {
      MOE_LOG(WARNING) << "could not remove the stale save " << Shown(JoinPath(dir_, n)) << ": "
                       << st;
    }
  }
  return removed;
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::List() const {
  std::vector<std::pair<int64_t, std::string>> out;
  auto names = ListDir(dir_);
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    if (n.size() != 13 || n.rfind("step_", 0) != 0) continue;  // skips step_*.tmp
    bool digits = true;
    for (size_t i = 5; i < n.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(n[i]));
    if (!digits) continue;
    out.emplace_back(std::stoll(n.substr(5)), JoinPath(dir_, n));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Status CheckpointManager::Validate(const std::string& path) const {
  MOE_ASSIGN_OR_RETURN(Node manifest, ReadCheckpointManifest(path));
  const Node* fp = manifest.Find("fingerprint");
  if (fp == nullptr || fp->scalar() != fingerprint_) {
    return FailedPreconditionError(
        "checkpoint " + path +
        " was written for another model shape; resuming a different model is not supported");
  }
  MOE_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path, /*verify=*/true));
  return reader.CheckComplete();
}

// The newest complete checkpoint that fits (0: none; -1: the newest one is of another model).
int64_t CheckpointManager::ChooseOnRankZero(Status* refusal) const {
  // A directory that is there but cannot be listed (storage trouble) is not an empty one: starting
  // over from step 0 would throw the run's progress away.
  if (PathExists(dir_)) {
    if (auto names = ListDir(dir_); !names.ok()) {
      *refusal = UnavailableError(
          "checkpoint directory " + Shown(dir_) + " cannot be read (" + names.status().message() +
          "); not starting over from step 0 while it may hold the run's checkpoints");
      return kUnreadable;
    }
  }
  std::vector<std::string> damaged;
  int64_t chosen = 0;
  for (const auto& [step, path] : List()) {
    Status st = Validate(path);
    if (st.ok()) {
      chosen = step;
      break;
    }
    if (st.code() == StatusCode::kFailedPrecondition) {
      *refusal = st;
      return kOtherModel;
    }
    MOE_LOG(ERROR) << "checkpoint " << Shown(path)
                   << " is damaged and is skipped: " << st.message();
    damaged.push_back(path);
  }
  if (chosen == 0 && !damaged.empty()) {
    MOE_LOG(WARNING) << "no complete checkpoint in " << Shown(dir_) << " (" << damaged.size()
                     << " damaged); starting from step 0";
  } else if (chosen > 0 && !damaged.empty()) {
    MOE_LOG(WARNING) << "falling back to the previous complete checkpoint " << StepDirName(chosen);
  }
  return chosen;
}

StatusOr<int64_t> CheckpointManager::Choose() {
  parallel::Communicator* world = par_.world;
  world->SetPhase("checkpoint restore");
  // Rank 0 picks; a refusal (another model, an unreadable directory) is broadcast as a negative
  // step so every rank fails the same way.
  Status refusal;
  int64_t chosen = par_.rank == 0 ? ChooseOnRankZero(&refusal) : 0;
  MOE_RETURN_IF_ERROR(world->BroadcastHost(&chosen, sizeof(chosen), 0));
  if (chosen < 0) {
    if (!refusal.ok()) return refusal;
    if (chosen == kUnreadable)
      return UnavailableError("the checkpoint directory " + Shown(dir_) +
                              " cannot be read on rank 0 (see its log)");
    return FailedPreconditionError("the checkpoint in " + Shown(dir_) +
                                   " does not fit this run's model (see rank 0's log)");
  }
  return chosen;
}

StatusOr<CheckpointInfo> CheckpointManager::Load(int64_t step, model::Model& model,
                                                 CheckpointedOptimizer& optimizer) {
  CheckpointInfo info;
  info.step = step;
  info.path = JoinPath(dir_, StepDirName(step));
  MOE_ASSIGN_OR_RETURN(CheckpointReader reader,
                       CheckpointReader::Open(info.path, /*verify=*/false));
  if (const Node* s = reader.manifest().Find("state")) info.state = *s;
  for (const TensorPiece& p : CheckpointPieces(model, optimizer, par_, /*writer=*/false)) {
    const std::vector<int64_t> stored = reader.GlobalShape(p.name);
    if (stored != p.global_shape) {
      return FailedPreconditionError("checkpoint " + Shown(info.path) + ": tensor " + p.name +
                                     " has another shape than this model's");
    }
    MOE_RETURN_IF_ERROR(reader.Read(p.name, p.begin, p.data));
  }
  optimizer.WeightsChanged();
  return info;
}

StatusOr<CheckpointInfo> CheckpointManager::Restore(model::Model& model,
                                                    CheckpointedOptimizer& optimizer) {
  MOE_ASSIGN_OR_RETURN(const int64_t chosen, Choose());
  if (chosen == 0) return CheckpointInfo();
  return Load(chosen, model, optimizer);
}

StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  if (!PathExists(dir)) return NotFoundError("no checkpoint directory " + dir);
  parallel::ParallelContext none;
  CheckpointManager m(dir, none, "", 0);
  for (const auto& [step, path] : m.List()) {
    if (ReadCheckpointManifest(path).ok()) return path;
  }
  return NotFoundError("no complete checkpoint in " + dir);
}

}  // namespace moe::checkpoint
