#include "worker/engine/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/file_util.h"
#include "common/log.h"

namespace moe {
namespace {

constexpr char kShardMagic[8] = {'M', 'O', 'E', 'S', 'H', 'R', 'D', '1'};
constexpr const char* kFormat = "moe-checkpoint/1";

std::string ShardName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard_%05d.bin", rank);
  return buf;
}

struct Entry {
  std::string name;
  Tensor tensor;
};

// The tensors a rank's shard holds.
std::vector<Entry> ShardEntries(Model& model, bool dense, bool experts) {
  std::vector<Entry> out;
  for (const auto& p : model.params().all()) {
    if ((p->expert && !experts) || (!p->expert && !dense)) continue;
    out.push_back({"param/" + p->name + "/value", p->value});
    out.push_back({"param/" + p->name + "/m", p->m});
    out.push_back({"param/" + p->name + "/v", p->v});
  }
  if (dense) {
    for (size_t i = 0; i < model.moe_layers().size(); ++i) {
      out.push_back({"router_bias/" + std::to_string(i), model.moe_layers()[i]->bias()});
    }
  }
  return out;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string dir, const ParallelContext& par, std::string fingerprint,
                                     int64_t keep_last)
    : dir_(std::move(dir)), par_(par), fingerprint_(std::move(fingerprint)), keep_last_(keep_last) {}

std::string CheckpointManager::StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

Status CheckpointManager::WriteShard(const std::string& path, int64_t step, Model& model) const {
  const bool dense = par_.rank == 0;
  std::vector<Entry> entries = ShardEntries(model, dense, /*experts=*/true);
  Node header = Node::Map();
  header.Set("rank", Node::Scalar(std::to_string(par_.rank)));
  header.Set("step", Node::Scalar(std::to_string(step)));
  Node list = Node::List();
  size_t offset = 0;
  for (const auto& e : entries) {
    Node t = Node::Map();
    t.Set("name", Node::Scalar(e.name, true));
    t.Set("dtype", Node::Scalar(DTypeName(e.tensor.dtype()), true));
    Node shape = Node::List();
    for (int64_t d : e.tensor.shape()) shape.Append(Node::Scalar(std::to_string(d)));
    t.Set("shape", std::move(shape));
    t.Set("offset", Node::Scalar(std::to_string(offset)));
    t.Set("bytes", Node::Scalar(std::to_string(e.tensor.nbytes())));
    offset += e.tensor.nbytes();
    list.Append(std::move(t));
  }
  header.Set("tensors", std::move(list));
  const std::string header_json = ToJson(header);
  std::string out;
  out.reserve(12 + header_json.size() + offset + 4);
  out.append(kShardMagic, 8);
  const uint32_t hlen = static_cast<uint32_t>(header_json.size());
  out.append(reinterpret_cast<const char*>(&hlen), 4);
  out += header_json;
  for (const auto& e : entries) {
    const size_t at = out.size();
    out.resize(at + e.tensor.nbytes());
    if (e.tensor.device().is_cpu()) {
      std::memcpy(out.data() + at, e.tensor.raw(), e.tensor.nbytes());
    } else {
      GetAllocator(e.tensor.device())->CopyToHost(out.data() + at, e.tensor.raw(), e.tensor.nbytes());
    }
  }
  const uint32_t crc = Crc32(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return WriteFileAtomic(path, out);
}

Status CheckpointManager::Save(int64_t step, Model& model, const Node& state) {
  const std::string final_dir = JoinPath(dir_, StepDirName(step));
  const std::string tmp_dir = final_dir + ".tmp";
  Communicator* world = par_.world;
  world->SetPhase("checkpoint at step " + std::to_string(step));
  if (par_.rank == 0) {
    MOE_RETURN_IF_ERROR(MakeDirs(dir_));
    if (PathExists(final_dir)) MOE_RETURN_IF_ERROR(RemoveAll(final_dir));  // a re-run of the same step
    MOE_RETURN_IF_ERROR(RemoveAll(tmp_dir));
    MOE_RETURN_IF_ERROR(MakeDirs(tmp_dir));
  }
  MOE_RETURN_IF_ERROR(world->Barrier());
  if (WritesShard()) MOE_RETURN_IF_ERROR(WriteShard(JoinPath(tmp_dir, ShardName(par_.rank)), step, model));
  MOE_RETURN_IF_ERROR(world->Barrier());
  if (par_.rank == 0) {
    Node manifest = Node::Map();
    manifest.Set("format", Node::Scalar(kFormat, true));
    manifest.Set("step", Node::Scalar(std::to_string(step)));
    manifest.Set("world_size", Node::Scalar(std::to_string(par_.world_size)));
    manifest.Set("expert_parallel", Node::Scalar(std::to_string(par_.expert_parallel)));
    manifest.Set("fingerprint", Node::Scalar(fingerprint_, true));
    Node shards = Node::List();
    for (int r = 0; r < par_.expert_parallel; ++r) shards.Append(Node::Scalar(ShardName(r), true));
    manifest.Set("shards", std::move(shards));
    manifest.Set("state", state);
    MOE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp_dir, "MANIFEST.json"), ToJson(manifest, 2) + "\n"));
    if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) return ErrnoError("rename " + tmp_dir, errno);
    MOE_RETURN_IF_ERROR(FsyncPath(dir_));
    if (keep_last_ > 0) {
      auto all = List();
      for (size_t i = static_cast<size_t>(keep_last_); i < all.size(); ++i) {
        Status st = RemoveAll(all[i].second);
        if (!st.ok()) MOE_LOG(WARNING) << "could not prune old checkpoint " << all[i].second << ": " << st;
      }
    }
  }
  return world->Barrier();
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::List() const {
  std::vector<std::pair<int64_t, std::string>> out;
  auto names = ListDir(dir_);
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    if (n.size() != 13 || n.rfind("step_", 0) != 0) continue;  // skips step_*.tmp
    bool digits = true;
    for (size_t i = 5; i < n.size(); ++i) digits = digits && std::isdigit(static_cast<unsigned char>(n[i]));
    if (!digits) continue;
    out.emplace_back(std::stoll(n.substr(5)), JoinPath(dir_, n));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

namespace {

StatusOr<std::string> ReadShardChecked(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  if (data.size() < 16 || std::memcmp(data.data(), kShardMagic, 8) != 0) {
    return DataLossError(path + ": not a checkpoint shard (bad magic or truncated to " + std::to_string(data.size()) + " bytes)");
  }
  uint32_t stored;
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  const uint32_t crc = Crc32(data.data(), data.size() - 4);
  if (crc != stored) return DataLossError(path + ": CRC mismatch (damaged or truncated shard)");
  return data;
}

StatusOr<Node> ReadManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, "MANIFEST.json");
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto doc = ParseYaml(text);
  if (!doc.ok()) return DataLossError(path + ": unreadable manifest: " + doc.status().message());
  const Node* fmt = doc->Find("format");
  if (fmt == nullptr || fmt->scalar() != kFormat) return DataLossError(path + ": not a " + std::string(kFormat) + " manifest");
  return *doc;
}

}  // namespace

Status CheckpointManager::Validate(const std::string& path) const {
  MOE_ASSIGN_OR_RETURN(Node manifest, ReadManifest(path));
  const Node* fp = manifest.Find("fingerprint");
  if (fp == nullptr || fp->scalar() != fingerprint_) {
    std::string ws = manifest.Find("world_size") ? manifest.Find("world_size")->scalar() : "?";
    std::string ep = manifest.Find("expert_parallel") ? manifest.Find("expert_parallel")->scalar() : "?";
    return FailedPreconditionError("checkpoint " + path + " was written for another model or layout (world_size " + ws +
                                   ", expert_parallel " + ep + "; this run: world_size " + std::to_string(par_.world_size) +
                                   ", expert_parallel " + std::to_string(par_.expert_parallel) +
                                   "); resuming at a different shape or layout is not supported");
  }
  const Node* shards = manifest.Find("shards");
  if (shards == nullptr || !shards->IsList()) return DataLossError(path + ": manifest lists no shards");
  for (const auto& s : shards->elements()) {
    MOE_RETURN_IF_ERROR(ReadShardChecked(JoinPath(path, s.scalar())).status());
  }
  return OkStatus();
}

Status CheckpointManager::LoadShard(const std::string& path, Model& model, bool dense, bool experts) const {
  MOE_ASSIGN_OR_RETURN(std::string data, ReadShardChecked(path));
  uint32_t hlen;
  std::memcpy(&hlen, data.data() + 8, 4);
  if (12 + static_cast<size_t>(hlen) + 4 > data.size()) return DataLossError(path + ": header length out of range");
  auto header = ParseYaml(std::string_view(data).substr(12, hlen));
  if (!header.ok()) return DataLossError(path + ": unreadable header: " + header.status().message());
  const size_t payload = 12 + hlen;
  const Node* tensors = header->Find("tensors");
  if (tensors == nullptr || !tensors->IsList()) return DataLossError(path + ": header lists no tensors");
  std::vector<Entry> want = ShardEntries(model, dense, experts);
  for (const auto& e : want) {
    const Node* found = nullptr;
    for (const auto& t : tensors->elements()) {
      if (t.Find("name") && t.Find("name")->scalar() == e.name) { found = &t; break; }
    }
    if (found == nullptr) return DataLossError(path + ": tensor " + e.name + " missing");
    MOE_ASSIGN_OR_RETURN(int64_t offset, found->Find("offset")->AsInt("offset"));
    MOE_ASSIGN_OR_RETURN(int64_t bytes, found->Find("bytes")->AsInt("bytes"));
    const std::string dtype = found->Find("dtype") ? found->Find("dtype")->scalar() : "";
    if (dtype != DTypeName(e.tensor.dtype()) || static_cast<size_t>(bytes) != e.tensor.nbytes()) {
      return FailedPreconditionError(path + ": tensor " + e.name + " is " + dtype + " of " + std::to_string(bytes) +
                                     " bytes, the model wants " + DTypeName(e.tensor.dtype()) + " of " +
                                     std::to_string(e.tensor.nbytes()));
    }
    if (payload + static_cast<size_t>(offset + bytes) + 4 > data.size()) return DataLossError(path + ": tensor " + e.name + " out of range");
    const char* src = data.data() + payload + offset;
    if (e.tensor.device().is_cpu()) std::memcpy(e.tensor.raw(), src, static_cast<size_t>(bytes));
    else GetAllocator(e.tensor.device())->CopyFromHost(e.tensor.raw(), src, static_cast<size_t>(bytes));
  }
  return OkStatus();
}

StatusOr<CheckpointInfo> CheckpointManager::Restore(Model& model) {
  Communicator* world = par_.world;
  world->SetPhase("checkpoint restore");
  // Rank 0 picks; a refusal (wrong layout) is broadcast as step -1 so every rank fails the same way.
  int64_t chosen = 0;
  Status refusal;
  if (par_.rank == 0) {
    std::vector<std::string> damaged;
    for (const auto& [step, path] : List()) {
      Status st = Validate(path);
      if (st.ok()) { chosen = step; break; }
      if (st.code() == StatusCode::kFailedPrecondition) { refusal = st; chosen = -1; break; }
      MOE_LOG(ERROR) << "checkpoint " << path << " is damaged and is skipped: " << st.message();
      damaged.push_back(path);
    }
    if (chosen == 0 && !damaged.empty()) {
      MOE_LOG(WARNING) << "no complete checkpoint in " << dir_ << " (" << damaged.size()
                       << " damaged); starting from step 0";
    } else if (chosen > 0 && !damaged.empty()) {
      MOE_LOG(WARNING) << "falling back to the previous complete checkpoint " << StepDirName(chosen);
    }
  }
  MOE_RETURN_IF_ERROR(world->BroadcastHost(&chosen, sizeof(chosen), 0));
  if (chosen < 0) {
    if (!refusal.ok()) return refusal;
    return FailedPreconditionError("the checkpoint in " + dir_ + " does not fit this run's model or layout (see rank 0's log)");
  }
  CheckpointInfo info;
  if (chosen == 0) return info;
  info.step = chosen;
  info.path = JoinPath(dir_, StepDirName(chosen));
  MOE_ASSIGN_OR_RETURN(Node manifest, ReadManifest(info.path));
  if (const Node* s = manifest.Find("state")) info.state = *s;
  // Dense state from shard 0, experts from the shard of this rank's position in its EP group.
  const int ep_rank = par_.ep_rank();
  MOE_RETURN_IF_ERROR(LoadShard(JoinPath(info.path, ShardName(0)), model, /*dense=*/true, /*experts=*/ep_rank == 0));
  if (ep_rank != 0) MOE_RETURN_IF_ERROR(LoadShard(JoinPath(info.path, ShardName(ep_rank)), model, false, true));
  return info;
}

}  // namespace moe
