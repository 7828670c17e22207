#include "worker/engine/model/mtp.h"

#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "worker/engine/model/head_loss.h"

namespace moe::model {
namespace {

// Row indices on `device`: for each sequence b and position i < len, b * stride + i + offset.
Tensor RowIndex(int64_t batch, int64_t len, int64_t stride, int64_t offset, Device device) {
  std::vector<int32_t> idx;
  idx.reserve(static_cast<size_t>(batch * len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < len; ++i) idx.push_back(static_cast<int32_t>(b * stride + i + offset));
  }
  Tensor host = Tensor::FromVector(idx, {batch * len});
  return device.is_cpu() ? host : host.Clone(device);
}

// Rows `index` of a 1-D i32 tensor.
Tensor GatherIds(const Tensor& ids, const Tensor& index) {
  Tensor out = Tensor::Empty({index.numel(), 1}, DType::kI32, ids.device());
  kernels::GatherRows(ids.Reshape({ids.numel(), 1}), index, out);
  return out.Reshape({index.numel()});
}

}  // namespace

MtpDepth::MtpDepth(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, int depth,
                   uint64_t seed, double out_std, parallel::TokenDispatcher* dispatcher,
                   DType routing_dtype, const AttentionContext& ctx)
    : depth_(depth) {
  const int64_t h = cfg.hidden_size;
  enorm_ = std::make_unique<RmsNorm>(params, prefix + ".enorm", h, cfg.norm_eps, seed);
  hnorm_ = std::make_unique<RmsNorm>(params, prefix + ".hnorm", h, cfg.norm_eps, seed);
  eh_proj_ = params.Fp8Gemm(params.Add(prefix + ".eh_proj", {h, 2 * h}, seed, cfg.init_std));
  block_ = std::make_unique<TransformerBlock>(params, prefix + ".block", cfg, cfg.MtpIsMoe(), seed,
                                              out_std, dispatcher, routing_dtype, ctx);
  final_norm_ = std::make_unique<RmsNorm>(params, prefix + ".final_norm", h, cfg.norm_eps, seed);
}

MtpDepth::~MtpDepth() = default;

StatusOr<Tensor> MtpDepth::Forward(const Inputs& in, const Param& embedding, const Param& head,
                                   DType logits_dtype, double ce_scale, double aux_coeff,
                                   bool backward, double* ce_sum, MoeStats* stats) {
  const int64_t len = in.seq_len - depth_, rows = in.batch * len, h = in.h_prev.dim(1);
  const Device dev = in.h_prev.device();
  Saved s;
  s.prev_rows = in.h_prev.dim(0);
  s.rows_prev = RowIndex(in.batch, len, in.prev_len, 0, dev);
  const Tensor tok_rows = RowIndex(in.batch, len, in.seq_len, depth_, dev);
  s.ids_k = GatherIds(in.ids, tok_rows);                     // t_{i+k}
  const Tensor targets_k = GatherIds(in.targets, tok_rows);  // t_{i+k+1}
  Tensor g = Tensor::Empty({rows, h}, in.h_prev.dtype(), dev);
  kernels::GatherRows(in.h_prev, s.rows_prev, g);
  Tensor e = Tensor::Empty({rows, h}, in.h_prev.dtype(), dev);
  kernels::EmbeddingForward(embedding.compute, s.ids_k, e);
  s.cat = Tensor::Empty({rows, 2 * h}, in.h_prev.dtype(), dev);
  kernels::CopyColumns(enorm_->Forward(e), 0, s.cat, 0, h);
  kernels::CopyColumns(hnorm_->Forward(g), 0, s.cat, h, h);
  MOE_ASSIGN_OR_RETURN(Tensor hk,
                       block_->Forward(Linear(s.cat, *eh_proj_), in.batch, len, aux_coeff, stats));
  const Tensor hn = final_norm_->Forward(hk);
  if (backward) {  // the shared head's backward runs here (head_loss.h): only dhn is kept
    HeadLoss hl = HeadLossForwardBackward(hn, head, logits_dtype, targets_k, ce_scale, in.ce_sink);
    s.dhn = std::move(hl.dhn);
    *ce_sum = hl.ce_sum;
  } else {
    *ce_sum = kernels::CrossEntropy(Linear(hn, head.compute, logits_dtype), targets_k, ce_scale,
                                    Tensor());
  }
  saved_.Push(std::move(s));
  return hk;
}

StatusOr<Tensor> MtpDepth::Backward(const Tensor& dh_next, const Param& embedding) {
  const Saved s = saved_.Pop();
  const DType dt = s.cat.dtype();
  Tensor dh = final_norm_->Backward(s.dhn);
  if (dh_next.defined()) kernels::Add(dh, dh, dh_next);
  MOE_ASSIGN_OR_RETURN(Tensor dhp, block_->Backward(dh));
  Tensor dcat = LinearBackward(dhp, s.cat, *eh_proj_);
  const int64_t rows = dcat.dim(0), h = dcat.dim(1) / 2;
  Tensor de = Tensor::Empty({rows, h}, dt, dcat.device()),
         dg = Tensor::Empty({rows, h}, dt, dcat.device());
  kernels::CopyColumns(dcat, 0, de, 0, h);
  kernels::CopyColumns(dcat, h, dg, 0, h);
  GradSink dtable(embedding);
  dtable.AddEmbedding(enorm_->Backward(de), s.ids_k);
  dtable.Commit();
  Tensor dh_prev = Tensor::Zeros({s.prev_rows, h}, dt, dcat.device());
  kernels::ScatterAddRows(hnorm_->Backward(dg), s.rows_prev, dh_prev);
  return dh_prev;
}

}  // namespace moe::model
