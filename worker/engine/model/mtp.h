// One multi-token-prediction depth (deepseek-v3-architecture.md): for positions i < S - k it
// predicts token t_{i+k+1} from the previous depth's hidden state at i (the main model's before its
// final norm for k = 1) and the embedding of t_{i+k}:
//   h' = eh_proj [RMSNorm_e(Emb(t_{i+k})) ; RMSNorm_h(h^{k-1}_i)]   (the embedding first)
//   h^k = TransformerBlock_k(h')  over positions 0 .. S-k-1 of each sequence
//   logits = Head(RMSNorm_k(h^k))
// The embedding and the head are the main model's (their gradients accumulate there); the norms,
// eh_proj and the block are the depth's own.
#pragma once

#include <memory>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/model/block.h"
#include "worker/engine/model/param.h"
#include "worker/engine/model/saved.h"

namespace moe::model {

class MtpDepth {
 public:
  // depth: k, 1-based.
  MtpDepth(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, int depth,
           uint64_t seed, double out_std, parallel::TokenDispatcher* dispatcher,
           DType routing_dtype, const AttentionContext& ctx);
  ~MtpDepth();

  struct Inputs {
    Tensor h_prev;     // [batch * prev_len, h]: the previous depth's hidden (or the main model's)
    int64_t prev_len;  // its positions per sequence (seq_len - k + 1)
    Tensor ids, targets;  // i32 [batch * seq_len]: the micro-batch's tokens and next tokens
    int64_t batch, seq_len;
    LossSink ce_sink;  // where the cross-entropy goes on the device (unset: into *ce_sum)
  };
  // Returns this depth's hidden [batch * (seq_len - k), h]; *ce_sum is its cross-entropy summed
  // over its positions. With `backward`, the shared head's backward runs here, its weight
  // gradient accumulated and the gradient on this depth's final norm kept for Backward
  // (head_loss.h).
  StatusOr<Tensor> Forward(const Inputs& in, const Param& embedding, const Param& head,
                           DType logits_dtype, double ce_scale, double aux_coeff, bool backward,
                           double* ce_sum, MoeStats* stats);
  // dh_next: the gradient on this depth's hidden from the next depth (undefined for the last).
  // Returns the gradient on h_prev ([batch * prev_len, h], zero where this depth did not read).
  StatusOr<Tensor> Backward(const Tensor& dh_next, const Param& embedding);
  MoeLayer* moe() const { return block_->moe(); }

 private:
  int depth_;
  std::unique_ptr<RmsNorm> enorm_, hnorm_, final_norm_;
  Param* eh_proj_;  // [h, 2h]
  std::unique_ptr<TransformerBlock> block_;
  // What the backward of one micro-batch needs.
  struct Saved {
    Tensor rows_prev, ids_k, cat, dhn;  // dhn: the loss's gradient on the final norm's output
    int64_t prev_rows = 0;
  };
  SavedQueue<Saved> saved_;
};

}  // namespace moe::model
