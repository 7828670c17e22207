// The on-disk form of checkpoints, independent of the parallel layout that wrote them.
//
// A checkpoint directory <dir>/step_00000030/ holds MANIFEST.json and one shard file per writing
// rank. Every tensor is a GLOBAL tensor (an expert weight is [E, 2F, h] whatever EP was) stored as
// pieces: contiguous ranges [begin, end) of its flattened elements, each in some shard. A rank of
// any other layout reads the ranges it needs, whichever shards hold them, so a job written at (PP,
// DP, EP, ZeRO) resumes at any other layout that fits the model, and moe-export reads a single
// tensor's ranges.
//
// Shard file: "MOESHRD2", a 4-byte little-endian header length, a JSON header {rank, step, pieces:
// [{name, dtype, shape (global), begin, count, offset}]}, the pieces' raw bytes, a CRC-32 of
// everything before it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/yaml.h"
#include "kernels/tensor.h"

namespace moe::checkpoint {

// One piece of a global tensor: elements [begin, begin + data.numel()) of its flattened form.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> global_shape;
  int64_t begin = 0;
  Tensor data;  // any device; f32, f64 or bf16
};

// What a checkpoint needs of the optimizer (train/optimizer.h is the one): the pieces of its state
// a rank writes (`writer`) or reads, whether its state is sharded (ZeRO), and the notice that
// restored weights replaced the master copy. Declared here, below the trainer's room, so that
// checkpoints do not depend on it (scripts/layers.sh).
class CheckpointedOptimizer {
 public:
  virtual ~CheckpointedOptimizer() = default;
  virtual bool distributed() const = 0;
  virtual void Pieces(bool writer, std::vector<TensorPiece>* out) const = 0;
  virtual void WeightsChanged() = 0;
};

// Writes `pieces` as one shard file (atomically: temporary name, fsync, rename).
Status WriteShardFile(const std::string& path, int rank, int64_t step,
                      const std::vector<TensorPiece>& pieces);

// A piece whose bytes are already in host memory (a snapshot taken for a background write).
struct HostPiece {
  std::string name;
  std::vector<int64_t> global_shape;
  int64_t begin = 0, count = 0;
  DType dtype = DType::kF32;
  const char* bytes = nullptr;  // count elements of dtype
};

// The same shard file as WriteShardFile, streamed from host memory in chunks (no copy of the
// whole shard): written as `path`.partial, fsynced, renamed, the directory fsynced. `after_chunk`
// (may be empty) is called after every chunk; an error it returns stops the write there (a test's
// failure, or a stop) and the partial file is removed.
Status WriteShardFileFromHost(const std::string& path, int rank, int64_t step,
                              const std::vector<HostPiece>& pieces,
                              const std::function<Status()>& after_chunk = nullptr);

// An opened checkpoint directory: its manifest and an index of every shard's pieces. Reads only
// what is asked for (pread), so a rank of a large job touches its own ranges only.
class CheckpointReader {
 public:
  // verify: read every shard whole and check its CRC (rank 0 does, before choosing a checkpoint).
  static StatusOr<CheckpointReader> Open(const std::string& dir, bool verify);

  const std::string& dir() const { return dir_; }
  const Node& manifest() const { return manifest_; }
  // The global tensors the shards hold, and a tensor's global shape (empty when absent).
  std::vector<std::string> Names() const;
  std::vector<int64_t> GlobalShape(const std::string& name) const;
  bool Has(const std::string& name) const { return index_.count(name) > 0; }
  // Whether every element of every tensor is in some shard (a missing shard leaves holes).
  Status CheckComplete() const;
  // Copies elements [begin, begin + dst.numel()) of `name` into dst, converting the dtype (f32,
  // f64, bf16). DATA_LOSS when some of the range is in no shard.
  Status Read(const std::string& name, int64_t begin, const Tensor& dst) const;

 private:
  struct Stored {
    std::string file;
    std::string dtype;
    int64_t begin = 0, count = 0;
    int64_t offset = 0;  // of its bytes in the file
  };
  struct Global {
    std::vector<int64_t> shape;
    std::vector<Stored> pieces;
  };
  Status IndexShard(const std::string& file, bool verify);

  std::string dir_;
  Node manifest_;
  std::map<std::string, Global> index_;
};

// MANIFEST.json of a checkpoint directory (DATA_LOSS when it is missing or not a checkpoint's).
StatusOr<Node> ReadCheckpointManifest(const std::string& dir);
extern const char* const kCheckpointFormat;

}  // namespace moe::checkpoint
