// Helpers for tests that train: a small job spec and a generated dataset, so the tests need no
// prepared corpus.
#pragma once

#include <string>

#include "common/job_spec.h"
#include "common/rng.h"
#include "worker/engine/data/indexed_dataset.h"

namespace moe::testing {

// A dataset from a random Markov chain over `vocab` ids (learnable, not uniform noise).
inline std::string MakeMarkovDataset(const std::string& prefix, int64_t vocab, int64_t tokens,
                                     uint64_t seed) {
  data::IndexedDatasetWriter w(prefix, vocab);
  Rng rng(seed);
  std::vector<int32_t> next(static_cast<size_t>(vocab * 4));
  for (auto& n : next) n = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  int32_t cur = 0;
  std::vector<int32_t> doc;
  for (int64_t i = 0; i < tokens; ++i) {
    cur = next[static_cast<size_t>(cur * 4 + static_cast<int64_t>(rng.Below(4)))];
    doc.push_back(cur);
    if (doc.size() == 500) {
      (void)w.AddDocument(doc);
      doc.clear();
    }
  }
  if (!doc.empty()) (void)w.AddDocument(doc);
  (void)w.Finish("{\"vocab_size\": " + std::to_string(vocab) + "}\n");
  return prefix;
}

inline JobSpec SmallJob(const std::string& data_prefix, int64_t vocab) {
  JobSpec s;
  s.name = "test";
  s.model = *ModelPreset("tiny");
  s.model.vocab_size = vocab;
  s.model.hidden_size = 32;
  s.model.num_heads = 2;
  s.model.num_layers = 3;
  s.model.dense_ffn_hidden = 64;
  s.model.moe.ffn_hidden = 32;
  s.data.path = data_prefix;
  s.data.seq_length = 32;
  s.data.micro_batch_size = 4;
  s.data.global_batch_size = 8;
  s.optimizer.warmup_steps = 5;
  s.training.steps = 60;
  s.training.log_interval = 1000;
  return s;
}

}  // namespace moe::testing
