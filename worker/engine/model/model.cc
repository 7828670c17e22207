#include "worker/engine/model/model.h"

#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "worker/engine/model/head_loss.h"
#include "worker/engine/model/mtp.h"
#include "worker/engine/parallel/step_profile.h"

namespace moe::model {

// One virtual pipeline stage's part of the model.
struct Model::Chunk {
  StageLayout layout;
  // The embedding (E), or on a last stage without E the copy MTP reads (Param::tied_copy).
  Param* embedding = nullptr;
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  std::vector<std::vector<Param*>>
      block_params;                     // the parameters each block made (used by it alone)
  int64_t backwards = 0;                // this step's backward passes so far (ArmGradsFinal)
  std::unique_ptr<RmsNorm> final_norm;  // L
  Param* head = nullptr;                // L: [V, h]
  std::vector<std::unique_ptr<MtpDepth>> mtp;
  // What the backward of one micro-batch needs.
  struct Saved {
    Tensor ids, dhn;  // dhn: the loss's gradient on the final norm's output
  };
  SavedQueue<Saved> saved;
};

Model::Model(const ModelConfig& cfg, const parallel::ParallelContext& par, uint64_t seed,
             DType dtype, Device device, parallel::PhaseTimer* phases,
             std::optional<DType> compute_dtype)
    : Model(cfg, par, seed,
            ModelOptions{.dtype = dtype,
                         .device = device,
                         .compute = compute_dtype,
                         .moments = std::nullopt,
                         .fp8 = false,
                         .max_seq_len = 0,
                         .recompute = {},
                         .materialized_attention = false,
                         .phases = phases,
                         .chunks = {}}) {}

Model::Model(const ModelConfig& cfg, const parallel::ParallelContext& par, uint64_t seed,
             const ModelOptions& o)
    : cfg_(cfg),
      dtype_(o.dtype),
      compute_(o.compute.value_or(o.dtype)),
      device_(o.device),
      params_(o.dtype, o.device, compute_, o.moments, o.fp8) {
  dispatcher_ = std::make_unique<parallel::TokenDispatcher>(
      par.expert_parallel > 1 ? par.ep_group : nullptr, cfg.moe.num_experts, o.phases);
  const std::vector<StageLayout> chunks = o.chunks.empty() ? EvenPipelineLayout(cfg, 1) : o.chunks;
  for (const StageLayout& layout : chunks) BuildChunk(layout, seed, o, par);
}

Model::~Model() = default;

void Model::AddMoeLayer(MoeLayer* l, int global_index) {
  if (l == nullptr) return;
  moe_layers_.push_back(l);
  moe_global_index_.push_back(global_index);
}

void Model::BuildChunk(const StageLayout& layout, uint64_t seed, const ModelOptions& o,
                       const parallel::ParallelContext& par) {
  (void)par;
  const int64_t h = cfg_.hidden_size, v = cfg_.vocab_size;
  // Megatron's initialisation: N(0, init_std), output projections scaled by 1/sqrt(2 * layers).
  const double out_std = cfg_.init_std / std::sqrt(2.0 * static_cast<double>(cfg_.num_layers));
  const AttentionContext ctx{.max_seq_len = o.max_seq_len,
                             .dtype = dtype_,
                             .device = device_,
                             .recompute = o.recompute,
                             .materialized_attention = o.materialized_attention};
  auto c = std::make_unique<Chunk>();
  c->layout = layout;
  if (layout.embedding) c->embedding = params_.Add("embedding", {v, h}, seed, cfg_.init_std);
  for (int64_t l = layout.first_layer; l < layout.first_layer + layout.num_layers; ++l) {
    const size_t before = params_.all().size();
    c->blocks.push_back(std::make_unique<TransformerBlock>(params_, "layers." + std::to_string(l),
                                                           cfg_, cfg_.IsMoeLayer(l), seed, out_std,
                                                           dispatcher_.get(), dtype_, ctx));
    AddMoeLayer(c->blocks.back()->moe(), static_cast<int>(l - cfg_.first_k_dense));
    c->block_params.emplace_back();
    for (size_t i = before; i < params_.all().size(); ++i)
      c->block_params.back().push_back(params_.all()[i].get());
  }
  if (layout.loss) {
    c->final_norm = std::make_unique<RmsNorm>(params_, "final_norm", h, cfg_.norm_eps, seed);
    c->head = params_.Add("head", {v, h}, seed, cfg_.init_std);
  }
  if (layout.mtp > 0 && c->embedding == nullptr) {
    // The last stage's copy of the embedding: the same initial values (the stream depends on the
    // name); its gradient joins the first stage's over the embedding group, so the copies stay
    // equal.
    c->embedding = params_.Find("embedding");
    if (c->embedding == nullptr) {
      c->embedding = params_.Add("embedding", {v, h}, seed, cfg_.init_std);
      c->embedding->tied_copy = true;
    }
  }
  for (int k = 1; k <= layout.mtp; ++k) {
    c->mtp.push_back(std::make_unique<MtpDepth>(params_, "mtp." + std::to_string(k - 1), cfg_, k,
                                                seed, out_std, dispatcher_.get(), dtype_, ctx));
    AddMoeLayer(c->mtp.back()->moe(), static_cast<int>(cfg_.num_moe_layers() + k - 1));
  }
  chunks_.push_back(std::move(c));
}

int Model::num_global_moe_layers() const {
  return static_cast<int>(cfg_.num_moe_layers() +
                          (cfg_.MtpTrains() && cfg_.MtpIsMoe() ? cfg_.mtp_depth : 0));
}

const StageLayout& Model::chunk_layout(int c) const {
  return chunks_.at(static_cast<size_t>(c))->layout;
}

namespace {

void AddMoeStats(const MoeStats& stats, int global_index, MicroBatchResult* r) {
  r->aux_loss += stats.aux_loss;
  r->tokens_per_expert.push_back(stats.tokens_per_expert);
  r->moe_layer.push_back(global_index);
  r->routing.push_back(stats.routing);
}

}  // namespace

StatusOr<Tensor> Model::ForwardChunk(int ci, const Tensor& input, const Tensor& tokens,
                                     const Tensor& targets, const LossScales& scales,
                                     MicroBatchResult* r) {
  Chunk& c = *chunks_.at(static_cast<size_t>(ci));
  const int64_t batch = tokens.dim(0), seq = tokens.dim(1), n = batch * seq;
  Chunk::Saved s;
  s.ids = tokens.Reshape({n});
  Tensor x;
  if (c.layout.embedding) {
    parallel::ProfilePhase phase("embedding fwd");
    x = Tensor::Empty({n, cfg_.hidden_size}, compute_, device_);
    kernels::EmbeddingForward(c.embedding->compute, s.ids, x);
  } else {
    MOE_CHECK(input.defined() && input.dim(0) == n && input.dim(1) == cfg_.hidden_size)
        << "chunk " << ci << " needs the previous stage's [" << n << ", " << cfg_.hidden_size
        << "] output";
    x = input;
  }
  const DeviceLosses& dl = device_losses_;
  const bool on_device = dl.acc.defined() && GradEnabled();
  const LossSink aux_sink = on_device ? LossSink{dl.acc, dl.aux} : LossSink{};
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    MoeStats stats;
    stats.aux_sink = aux_sink;
    MOE_ASSIGN_OR_RETURN(x, c.blocks[i]->Forward(x, batch, seq, scales.aux_coeff, &stats));
    const int64_t layer = c.layout.first_layer + static_cast<int64_t>(i);
    if (c.blocks[i]->moe() != nullptr)
      AddMoeStats(stats, static_cast<int>(layer - cfg_.first_k_dense), r);
  }
  if (c.layout.loss) {
    MOE_CHECK(targets.shape() == tokens.shape())
        << "targets " << targets.ShapeString() << " vs tokens " << tokens.ShapeString();
    MOE_CHECK(scales.mtp.size() >= c.mtp.size())
        << "loss scales for " << scales.mtp.size() << " MTP depths, the model trains "
        << c.mtp.size();
    r->tokens += n;
    const Tensor tgt = targets.Reshape({n});
    const bool backward = GradEnabled();
    parallel::ProfilePhase phase("head, loss fwd");
    const Tensor hn = c.final_norm->Forward(x);
    // Logits and the loss in the master dtype (fp32 when the activations are bf16). With
    // gradients, the head's backward runs here too, a chunk of rows at a time (head_loss.h): only
    // the gradient on hn is kept, and the head's gradient is accumulated already, so a forward
    // with gradients on must be followed by its backward (as every schedule does; evaluation runs
    // under NoGradScope).
    if (backward) {
      HeadLoss hl = HeadLossForwardBackward(hn, *c.head, dtype_, tgt, scales.ce,
                                            on_device ? LossSink{dl.acc, dl.ce} : LossSink{});
      s.dhn = std::move(hl.dhn);
      r->ce_sum = hl.ce_sum;
    } else {
      last_logits_ = Linear(hn, c.head->compute, dtype_);
      r->ce_sum = kernels::CrossEntropy(last_logits_, tgt, scales.ce, Tensor());
    }
    MtpDepth::Inputs in{x, seq, s.ids, tgt, batch, seq, {}};
    if (!c.mtp.empty()) phase.Switch("mtp fwd");  // its blocks' phases are their own
    for (size_t k = 0; k < c.mtp.size(); ++k) {
      double ce = 0;
      MoeStats stats;
      stats.aux_sink = aux_sink;
      if (on_device) in.ce_sink = LossSink{dl.acc, dl.mtp + static_cast<int64_t>(k)};
      MOE_ASSIGN_OR_RETURN(Tensor hk,
                           c.mtp[k]->Forward(in, *c.embedding, *c.head, dtype_, scales.mtp[k],
                                             scales.aux_coeff, backward, &ce, &stats));
      r->mtp_ce_sums.push_back(ce);
      if (c.mtp[k]->moe() != nullptr)
        AddMoeStats(stats, static_cast<int>(cfg_.num_moe_layers() + static_cast<int64_t>(k)), r);
      in.h_prev = hk;
      in.prev_len = seq - static_cast<int64_t>(k) - 1;
    }
    x = Tensor();
  }
  c.saved.Push(std::move(s));
  return x;
}

// MTP depths last to first (each hands the gradient on its input hidden state to the one before),
// then the main head, the blocks, the embedding.
StatusOr<Tensor> Model::BackwardChunk(int ci, const Tensor& output_grad) {
  Chunk& c = *chunks_.at(static_cast<size_t>(ci));
  const Chunk::Saved s = c.saved.Pop();
  Tensor dx;
  if (c.layout.loss) {
    Tensor dh_next;
    parallel::ProfilePhase phase(c.mtp.empty() ? "head, loss bwd" : "mtp bwd");
    for (auto it = c.mtp.rbegin(); it != c.mtp.rend(); ++it) {
      MOE_ASSIGN_OR_RETURN(dh_next, (*it)->Backward(dh_next, *c.embedding));
    }
    phase.Switch("head, loss bwd");
    dx = c.final_norm->Backward(s.dhn);  // the head's own backward ran in the forward
    if (dh_next.defined()) kernels::Add(dx, dx, dh_next);
  } else {
    MOE_CHECK(output_grad.defined()) << "chunk " << ci << " needs the gradient on its output";
    dx = output_grad;
  }
  const bool last =
      grads_final_ && ++c.backwards == backwards_armed_;  // the step's last backward here
  for (size_t i = c.blocks.size(); i-- > 0;) {
    MOE_ASSIGN_OR_RETURN(dx, c.blocks[i]->Backward(dx));
    if (last) grads_final_(c.block_params[i]);
  }
  if (!c.layout.embedding) return dx;
  parallel::ProfilePhase phase("embedding bwd");
  GradSink de(*c.embedding);
  de.AddEmbedding(dx, s.ids);
  de.Commit();
  return Tensor();
}

void Model::ArmGradsFinal(int64_t backwards_per_chunk, GradsFinalFn fn) {
  grads_final_ = std::move(fn);
  backwards_armed_ = backwards_per_chunk;
  for (auto& c : chunks_) c->backwards = 0;
}

StatusOr<double> Model::WholeModel(const Tensor& tokens, const Tensor& targets,
                                   const LossScales& scales, bool backward,
                                   MicroBatchResult* result) {
  MOE_CHECK(chunks_.size() == 1 && chunks_[0]->layout.embedding && chunks_[0]->layout.loss)
      << "the whole-model pass needs every stage on this rank (pipeline_parallel 1)";
  *result = MicroBatchResult();
  MOE_RETURN_IF_ERROR(ForwardChunk(0, Tensor(), tokens, targets, scales, result).status());
  double loss = scales.ce * result->ce_sum + result->aux_loss;
  for (size_t k = 0; k < result->mtp_ce_sums.size(); ++k)
    loss += scales.mtp[k] * result->mtp_ce_sums[k];
  if (backward) MOE_RETURN_IF_ERROR(BackwardChunk(0, Tensor()).status());
  return loss;
}

StatusOr<DecodeCache> Model::NewDecodeCache(int64_t capacity) const {
  if (chunks_.size() != 1 || !chunks_[0]->layout.embedding || !chunks_[0]->layout.loss)
    return FailedPreconditionError("decoding needs the whole model on one rank");
  const int64_t width = chunks_[0]->blocks.empty() ? 0 : chunks_[0]->blocks[0]->cache_width();
  if (width == 0) {
    return FailedPreconditionError("model.attention.type " + cfg_.attention.type +
                                   " keeps no decoding cache (mla does)");
  }
  if (capacity <= 0) return InvalidArgumentError("a decoding cache needs a capacity > 0");
  DecodeCache cache;
  for (size_t l = 0; l < chunks_[0]->blocks.size(); ++l)
    cache.layers.push_back({Tensor::Empty({capacity, width}, compute_, device_), 0});
  return cache;
}

StatusOr<Tensor> Model::Decode(const Tensor& tokens, DecodeCache& cache) {
  Chunk& c = *chunks_.at(0);
  const int64_t n = tokens.numel();
  if (cache.layers.size() != c.blocks.size() || cache.length() + n > cache.capacity()) {
    return FailedPreconditionError("the decoding cache holds " + std::to_string(cache.capacity()) +
                                   " positions; " + std::to_string(cache.length()) + " + " +
                                   std::to_string(n) + " asked");
  }
  NoGradScope inference;
  Tensor x = Tensor::Empty({n, cfg_.hidden_size}, compute_, device_);
  kernels::EmbeddingForward(c.embedding->compute, tokens.Reshape({n}), x);
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    MOE_ASSIGN_OR_RETURN(x, c.blocks[i]->Decode(x, cache.layers[i]));
  }
  return Linear(c.final_norm->Forward(x), c.head->compute, dtype_);
}

StatusOr<MicroBatchResult> Model::ForwardBackward(const Tensor& tokens, const Tensor& targets,
                                                  const LossScales& scales) {
  MicroBatchResult result;
  MOE_RETURN_IF_ERROR(WholeModel(tokens, targets, scales, true, &result).status());
  return result;
}

StatusOr<double> Model::Loss(const Tensor& tokens, const Tensor& targets, const LossScales& scales,
                             MicroBatchResult* result) {
  MicroBatchResult local;
  NoGradScope forward_only;  // the layers keep nothing for a backward
  return WholeModel(tokens, targets, scales, false, result != nullptr ? result : &local);
}

}  // namespace moe::model
