// Deterministic batches: which sequences a rank trains on at a step depends only on (seed, step,
// rank) and the layout, so a resumed run and an uninterrupted one see the same data, and W ranks
// together see exactly the global batch one rank would.
//
// The token stream (all sequences concatenated, documents separated by moe-prep's end-of-document
// token) is cut into samples of seq_length + 1 tokens that overlap by one (inputs and shifted
// targets). Each epoch visits every sample once in an order shuffled by (seed, epoch).
//
// data.split (Megatron's --split) divides the documents, in order, into train, valid and test
// ranges; training samples only the train range, evaluation the valid one (in order, unshuffled:
// the same batches every time).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/engine/data/indexed_dataset.h"

namespace moe::data {

enum class DataSplit { kTrain = 0, kValid = 1, kTest = 2, kAll = 3 };
const char* DataSplitName(DataSplit s);

// A split's documents [first_doc, end_doc) and their tokens [begin_token, end_token).
struct DataRange {
  int64_t first_doc = 0, end_doc = 0;
  int64_t begin_token = 0, end_token = 0;
};
// Megatron's split: document boundaries at round(cumulative weight share x documents), the last one
// moved to the end.
DataRange SplitRange(const IndexedDataset& ds, const std::array<double, 3>& weights,
                     DataSplit which);

class BatchSampler {
 public:
  // `dataset` may be null for the synthetic source (uniform random tokens from the seed). Samples
  // come from the tokens of `range` (the whole dataset when range.end_token == 0); shuffled per
  // epoch unless `in_order`.
  BatchSampler(const DataConfig& data, int64_t vocab_size, uint64_t seed, int world_size,
               std::unique_ptr<IndexedDataset> dataset, DataRange range = {},
               bool in_order = false);
  // The sampler of `which` split of the job's data (training: kTrain, shuffled; evaluation: in
  // order).
  static StatusOr<std::unique_ptr<BatchSampler>> Create(const JobSpec& spec, int world_size,
                                                        DataSplit which = DataSplit::kTrain);

  int64_t num_samples() const { return num_samples_; }
  // Fills tokens and targets ([micro_batch_size, seq_length] each) for micro-batch `micro` of
  // `rank` in the global batch that starts at sample `first_sample` (the samples consumed before
  // this step), each rank taking `per_rank` consecutive samples of it.
  void MicroBatch(int64_t first_sample, int64_t per_rank, int rank, int64_t micro, int32_t* tokens,
                  int32_t* targets);
  // Global sample index -> sample id (the shuffled order of its epoch).
  int64_t SampleAt(int64_t global_index);

 private:
  void EnsureEpoch(int64_t epoch);
  DataConfig data_;
  int64_t vocab_size_;
  uint64_t seed_;
  int world_size_;
  std::unique_ptr<IndexedDataset> dataset_;
  DataRange range_;
  bool in_order_ = false;
  int64_t num_samples_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;  // this epoch's permutation
};

}  // namespace moe::data
