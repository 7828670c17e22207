// One pre-norm transformer block of DeepSeek-V3: attention, then a dense SwiGLU FFN or the MoE
// layer, each behind an RMSNorm and a residual.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/model/attention.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/model/moe_layer.h"
#include "worker/engine/model/param.h"
#include "worker/engine/model/saved.h"

namespace moe::model {

// One pre-norm transformer block: x + attn(norm(x)), then + ffn(norm(.)) where the FFN is a dense
// SwiGLU or the MoE layer.
class TransformerBlock {
 public:
  TransformerBlock(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, bool moe,
                   uint64_t seed, double out_std, parallel::TokenDispatcher* dispatcher,
                   DType routing_dtype, const AttentionContext& ctx);
  //   x [batch * seq_len, h]; aux_coeff: alpha / (sequences in the global batch); stats filled for
  //   a MoE block
  StatusOr<Tensor> Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff,
                           MoeStats* stats);
  StatusOr<Tensor> Backward(const Tensor& dy);
  // Inference (no gradients): the next x.dim(0) positions of one sequence [n, h] through the block,
  // attending with `cache` (AttentionLayer::Decode), which they join.
  StatusOr<Tensor> Decode(const Tensor& x, LayerKvCache& cache);
  int64_t cache_width() const { return attn_->cache_width(); }
  MoeLayer* moe() const { return moe_.get(); }

 private:
  StatusOr<Tensor> Compute(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff,
                           MoeStats* stats);
  // The FFN half: x1 + ffn(u), u = norm(x1) (computed with x1 by RmsNorm::AddForward).
  StatusOr<Tensor> FeedForward(const Tensor& x1, const Tensor& u, int64_t batch, int64_t seq_len,
                               double aux_coeff, MoeStats* stats);
  // With full recompute: the block's input and shape, to run its forward again before the backward.
  struct Saved {
    Tensor x;
    int64_t batch = 0, seq_len = 0;
    double aux_coeff = 0;
  };
  std::unique_ptr<RmsNorm> attn_norm_, ffn_norm_;
  std::unique_ptr<AttentionLayer> attn_;
  std::unique_ptr<SwigluFfn> dense_;
  std::unique_ptr<MoeLayer> moe_;
  bool full_recompute_;
  SavedQueue<Saved> saved_;
};

}  // namespace moe::model
