#include "worker/engine/model/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "kernels/elementwise.h"

namespace moe::model {

int32_t SampleToken(const std::vector<double>& logits, const SamplingOptions& o, Rng& rng) {
  const int64_t v = static_cast<int64_t>(logits.size());
  std::vector<int32_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first, ties to the lower id.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (o.temperature <= 0) return order[0];
  const size_t keep = o.top_k > 0 ? static_cast<size_t>(std::min(o.top_k, v)) : order.size();
  const double top = logits[order[0]];
  std::vector<double> p;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    p.push_back(std::exp((logits[order[i]] - top) / o.temperature));
    sum += p.back();
  }
  // top-p: the smallest prefix whose mass reaches p (at least one token).
  size_t n = 0;
  double mass = 0;
  while (n < p.size() && (n == 0 || mass < o.top_p * sum)) mass += p[n++];
  const double u = rng.Uniform() * mass;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u < acc) return order[i];
  }
  return order[n - 1];
}

StatusOr<Generator> Generator::Create(Model& model, int64_t max_positions, bool use_cache) {
  if (max_positions <= 0) return InvalidArgumentError("generation: max_positions must be > 0");
  Generator g(model, max_positions);
  if (use_cache) {
    MOE_ASSIGN_OR_RETURN(DecodeCache c, model.NewDecodeCache(max_positions));
    g.cache_.emplace(std::move(c));
  }
  return g;
}

void Generator::TakeLastRow(const Tensor& logits) {
  const int64_t v = logits.dim(1);
  const Tensor last = logits.Rows(logits.dim(0) - 1, logits.dim(0)).Clone(Device::Cpu());
  Tensor f64 = Tensor::Empty({v}, DType::kF64);
  kernels::Convert(last.Reshape({v}), f64);
  logits_ = f64.ToVector<double>();
}

// The whole sequence again, as a batch of one, forward only.
Status Generator::Recompute() {
  const int64_t n = static_cast<int64_t>(tokens_.size());
  Tensor t = Tensor::FromVector(tokens_, {1, n});
  const Device dev = model_->device();
  LossScales scales;
  scales.ce = 1;
  scales.mtp.assign(static_cast<size_t>(std::max<int64_t>(model_->config().mtp_depth, 0)), 0.0);
  const Tensor on_device = dev.is_cpu() ? t : t.Clone(dev);
  MOE_RETURN_IF_ERROR(model_->Loss(on_device, on_device, scales).status());
  TakeLastRow(model_->last_logits());
  return OkStatus();
}

Status Generator::Append(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) return InvalidArgumentError("generation: nothing to append");
  const int64_t total = static_cast<int64_t>(tokens_.size() + tokens.size());
  if (total > max_positions_) {
    return OutOfRangeError("generation: " + std::to_string(total) + " positions, more than the " +
                           std::to_string(max_positions_) + " it was set up for");
  }
  const int64_t v = model_->config().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= v)
      return InvalidArgumentError("generation: token id " + std::to_string(t) +
                                  " outside the vocabulary [0, " + std::to_string(v) + ")");
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  if (!cache_) return Recompute();
  const int64_t n = static_cast<int64_t>(tokens.size());
  Tensor t = Tensor::FromVector(tokens, {n});
  const Device dev = model_->device();
  MOE_ASSIGN_OR_RETURN(const Tensor logits,
                       model_->Decode(dev.is_cpu() ? t : t.Clone(dev), *cache_));
  TakeLastRow(logits);
  return OkStatus();
}

StatusOr<Generation> Generate(Generator& g, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const SamplingOptions& o, int64_t stop_id) {
  if (prompt.empty()) return InvalidArgumentError("generation: an empty prompt");
  using Clock = std::chrono::steady_clock;
  Generation out;
  Rng rng(HashCombine(o.seed, 0x67656e));  // "gen": apart from the other streams of a seed
  auto t0 = Clock::now();
  MOE_RETURN_IF_ERROR(g.Append(prompt));
  out.prompt_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int32_t next = SampleToken(g.logits(), o, rng);
    out.tokens.push_back(next);
    if (next == stop_id || i + 1 == max_new_tokens) break;
    MOE_RETURN_IF_ERROR(g.Append({next}));
  }
  out.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace moe::model
