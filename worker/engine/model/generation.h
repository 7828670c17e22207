// Text generation from a trained model: the next token's logits after a sequence, by MLA's latent
// cache (Model::Decode: each new position computes only itself) or by running the whole prefix
// again every step (Model::Loss; any attention); and the choice of the next token from them:
// greedy, or sampled with a temperature, top-k and top-p from a seeded stream.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/rng.h"
#include "common/status.h"
#include "worker/engine/model/model.h"

namespace moe::model {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token; ties to the lower id)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the smallest set of most likely tokens whose mass reaches p
  uint64_t seed = 0;
};

// The next token from `logits` [V]: greedy at temperature 0, else a draw from softmax(logits / T)
// restricted by top_k and top_p (ties in the ranking to the lower id).
int32_t SampleToken(const std::vector<double>& logits, const SamplingOptions& o, Rng& rng);

// One sequence's next-token logits as it grows.
class Generator {
 public:
  // use_cache: Model::Decode with a cache of `max_positions` (the model's attention must keep one:
  // MLA); otherwise every step runs the whole sequence so far through Model::Loss.
  static StatusOr<Generator> Create(Model& model, int64_t max_positions, bool use_cache);
  // Appends tokens (the prompt, then each chosen token) and computes the logits of the position
  // after the last: a cache decodes only the new ones.
  Status Append(const std::vector<int32_t>& tokens);
  const std::vector<double>& logits() const { return logits_; }  // [V], after the last token
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::optional<DecodeCache>& cache() const { return cache_; }

 private:
  Generator(Model& model, int64_t max_positions) : model_(&model), max_positions_(max_positions) {}
  Status Recompute();
  void TakeLastRow(const Tensor& logits);

  Model* model_;
  int64_t max_positions_;
  std::optional<DecodeCache> cache_;
  std::vector<int32_t> tokens_;
  std::vector<double> logits_;
};

struct Generation {
  std::vector<int32_t> tokens;  // the generated ones (after the prompt), the stop token included
  double prompt_seconds = 0;    // the prompt's pass
  double decode_seconds = 0;    // the generated tokens' passes
};

// Up to max_new_tokens tokens after `prompt` (non-empty), stopping after `stop_id` (< 0: never).
StatusOr<Generation> Generate(Generator& g, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const SamplingOptions& o, int64_t stop_id);

}  // namespace moe::model
