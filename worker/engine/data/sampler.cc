#include "worker/engine/data/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/rng.h"

namespace moe::data {

const char* DataSplitName(DataSplit s) {
  switch (s) {
    case DataSplit::kTrain:
      return "train";
    case DataSplit::kValid:
      return "valid";
    case DataSplit::kTest:
      return "test";
    case DataSplit::kAll:
      break;
  }
  return "all";
}

DataRange SplitRange(const IndexedDataset& ds, const std::array<double, 3>& weights,
                     DataSplit which) {
  const int64_t docs = ds.num_documents();
  DataRange r;
  if (which == DataSplit::kAll) {
    r.end_doc = docs;
  } else {
    const double total = weights[0] + weights[1] + weights[2];
    std::array<int64_t, 4> at = {0, 0, 0, 0};
    for (size_t i = 0; i < 3; ++i)
      at[i + 1] = at[i] + std::llround(weights[i] / total * static_cast<double>(docs));
    const int64_t diff = at[3] - docs;
    for (size_t i = 1; i < 4; ++i) at[i] = std::clamp<int64_t>(at[i] - diff, 0, docs);
    r.first_doc = at[static_cast<size_t>(which)];
    r.end_doc = at[static_cast<size_t>(which) + 1];
  }
  r.begin_token = ds.DocumentTokenBegin(r.first_doc);
  r.end_token = ds.DocumentTokenBegin(r.end_doc);
  return r;
}

BatchSampler::BatchSampler(const DataConfig& data, int64_t vocab_size, uint64_t seed,
                           int world_size, std::unique_ptr<IndexedDataset> dataset, DataRange range,
                           bool in_order)
    : data_(data),
      vocab_size_(vocab_size),
      seed_(seed),
      world_size_(world_size),
      dataset_(std::move(dataset)),
      range_(range),
      in_order_(in_order) {
  if (dataset_) {
    if (range_.end_token == 0) range_.end_token = dataset_->num_tokens();
    num_samples_ = (range_.end_token - range_.begin_token - 1) / data_.seq_length;
  } else {
    num_samples_ = int64_t{1} << 40;  // synthetic: never repeats in practice
  }
}

StatusOr<std::unique_ptr<BatchSampler>> BatchSampler::Create(const JobSpec& spec, int world_size,
                                                             DataSplit which) {
  std::unique_ptr<IndexedDataset> ds;
  DataRange range;
  if (spec.data.source == "indexed") {
    auto opened = IndexedDataset::Open(spec.data.path, spec.model.vocab_size);
    if (!opened.ok()) return opened.status();
    ds = std::move(*opened);
    MOE_ASSIGN_OR_RETURN(const auto weights, ParseSplit(spec.data.split, "spec.data.split"));
    range = SplitRange(*ds, weights, which);
    const int64_t tokens = range.end_token - range.begin_token;
    if ((tokens - 1) / spec.data.seq_length < 1) {
      return FailedPreconditionError(
          "dataset " + spec.data.path + ": its " + DataSplitName(which) + " split (documents " +
          std::to_string(range.first_doc) + "-" + std::to_string(range.end_doc) + ", split '" +
          spec.data.split + "') has " + std::to_string(tokens) +
          " tokens, fewer than one sample of spec.data.seq_length + 1 = " +
          std::to_string(spec.data.seq_length + 1));
    }
  }
  const bool in_order = which != DataSplit::kTrain;
  return std::make_unique<BatchSampler>(spec.data, spec.model.vocab_size, spec.training.seed,
                                        world_size, std::move(ds), range, in_order);
}

void BatchSampler::EnsureEpoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  order_.resize(static_cast<size_t>(num_samples_));
  for (int64_t i = 0; i < num_samples_; ++i) order_[static_cast<size_t>(i)] = i;
  Rng rng(HashCombine(HashCombine(seed_, 0xDA7A), static_cast<uint64_t>(epoch)));
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i + 1)));
    std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
  }
}

int64_t BatchSampler::SampleAt(int64_t global_index) {
  if (!dataset_) return global_index;
  if (in_order_) return global_index % num_samples_;
  EnsureEpoch(global_index / num_samples_);
  return order_[static_cast<size_t>(global_index % num_samples_)];
}

void BatchSampler::MicroBatch(int64_t first_sample, int64_t per_rank, int rank, int64_t micro,
                              int32_t* tokens, int32_t* targets) {
  const int64_t s = data_.seq_length, mbs = data_.micro_batch_size;
  std::vector<int32_t> buf(static_cast<size_t>(s + 1));
  for (int64_t i = 0; i < mbs; ++i) {
    // Position in the global batch: ranks own contiguous slices, micro-batches run through them.
    const int64_t j = static_cast<int64_t>(rank) * per_rank + micro * mbs + i;
    const int64_t global = first_sample + j;
    const int64_t sample = SampleAt(global);
    if (dataset_) {
      dataset_->Read(range_.begin_token + sample * s, s + 1, buf.data());
    } else {
      Rng rng(HashCombine(HashCombine(seed_, 0x5EED), static_cast<uint64_t>(sample)));
      for (auto& t : buf) t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab_size_)));
    }
    std::copy(buf.begin(), buf.begin() + s, tokens + i * s);
    std::copy(buf.begin() + 1, buf.end(), targets + i * s);
  }
}

}  // namespace moe::data
