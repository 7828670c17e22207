#include "worker/engine/layers.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "worker/engine/rope_freqs.h"

namespace moe {

Tensor Linear(const Tensor& x, const Tensor& w, std::optional<DType> out_dtype) {
  Tensor y = Tensor::Empty({x.dim(0), w.dim(0)}, out_dtype.value_or(x.dtype()), x.device());
  kernels::Gemm(x, false, w, true, y);
  return y;
}

Tensor LinearBackward(const Tensor& dy, const Tensor& x, const Param& w) {
  kernels::Gemm(dy, true, x, false, w.grad, 1.0, 1.0);
  Tensor dx = Tensor::Empty({dy.dim(0), w.compute.dim(1)}, dy.dtype(), dy.device());
  kernels::Gemm(dy, false, w.compute, false, dx);
  return dx;
}

Tensor CastTo(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype) return t;
  Tensor out = Tensor::Empty(t.shape(), dtype, t.device());
  kernels::Convert(t, out);
  return out;
}

// --- RmsNorm ---------------------------------------------------------------------------------------

RmsNorm::RmsNorm(ParamSet& params, const std::string& name, int64_t dim, double eps, uint64_t seed) : eps_(eps) {
  w_ = params.Add(name, {dim}, seed, 0.0, 1.0, /*weight_decay=*/false);
}

Tensor RmsNorm::Forward(const Tensor& x) {
  x_ = x;
  rstd_ = Tensor::Empty({x.dim(0)}, AccumType(x.dtype()), x.device());
  Tensor y = Tensor::Empty(x.shape(), x.dtype(), x.device());
  kernels::RmsNormForward(x, w_->compute, eps_, y, rstd_);
  return y;
}

Tensor RmsNorm::Backward(const Tensor& dy) {
  Tensor dx = Tensor::Empty(dy.shape(), dy.dtype(), dy.device());
  kernels::RmsNormBackward(dy, x_, w_->compute, rstd_, dx, w_->grad);
  x_ = rstd_ = Tensor();
  return dx;
}

// --- Attention -------------------------------------------------------------------------------------

namespace {

// The rotary frequencies of a layer, on its device, and the softmax scale they imply.
struct Rotary {
  Tensor inv_freq;    // [rope_dim / 2]
  double scale = 1;   // 1/sqrt(d_qk), times YaRN's mscale^2
};

Rotary MakeRotary(const ModelConfig& cfg, int64_t rope_dim, int64_t qk_dim, const AttentionContext& ctx) {
  const RopeFrequencies f = ComputeRopeFrequencies(cfg.rope_theta, rope_dim, cfg.rope_scaling, ctx.max_seq_len);
  Tensor host = Tensor::Empty({rope_dim / 2}, ctx.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  for (size_t j = 0; j < f.inv_freq.size(); ++j) {
    if (host.dtype() == DType::kF64) host.data<double>()[j] = f.inv_freq[j];
    else host.data<float>()[j] = static_cast<float>(f.inv_freq[j]);
  }
  return {ctx.device.is_cpu() ? host : host.Clone(ctx.device), f.scale_factor / std::sqrt(static_cast<double>(qk_dim))};
}

// The log-sum-exp buffer of the attention kernel: f32 for f32 and bf16 activations, f64 for f64.
Tensor LseFor(const Tensor& q, int64_t rows) { return Tensor::Empty({rows}, AccumType(q.dtype()), q.device()); }

// Multi-head attention with (half-split) RoPE on q and k: fused qkv projection, the tiled attention
// kernel, output projection.
class MhaAttention final : public AttentionLayer {
 public:
  MhaAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std,
               const AttentionContext& ctx)
      : heads_(cfg.num_heads), head_dim_(cfg.head_dim()), rotary_(MakeRotary(cfg, cfg.head_dim(), cfg.head_dim(), ctx)) {
    const int64_t h = cfg.hidden_size;
    wqkv_ = params.Add(prefix + ".wqkv", {3 * h, h}, seed, cfg.init_std);
    wo_ = params.Add(prefix + ".wo", {h, h}, seed, out_std);
  }

  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) override {
    batch_ = batch;
    seq_ = seq_len;
    x_ = x;
    const int64_t t = x.dim(0), hd = heads_ * head_dim_;
    Tensor qkv = Linear(x, wqkv_->compute);
    q_ = Tensor::Empty({t, hd}, x.dtype(), x.device());
    k_ = Tensor::Empty({t, hd}, x.dtype(), x.device());
    v_ = Tensor::Empty({t, hd}, x.dtype(), x.device());
    kernels::CopyColumns(qkv, 0, q_, 0, hd);
    kernels::CopyColumns(qkv, hd, k_, 0, hd);
    kernels::CopyColumns(qkv, 2 * hd, v_, 0, hd);
    kernels::RopeForward(q_, seq_len, heads_, 0, rotary_.inv_freq, kernels::RopeLayout::kHalfSplit);
    kernels::RopeForward(k_, seq_len, heads_, 0, rotary_.inv_freq, kernels::RopeLayout::kHalfSplit);
    ctx_ = Tensor::Empty({t, hd}, x.dtype(), x.device());
    lse_ = LseFor(q_, batch * heads_ * seq_len);
    kernels::AttentionForward(q_, k_, v_, batch, seq_len, heads_, rotary_.scale, ctx_, lse_);
    return Linear(ctx_, wo_->compute);
  }

  Tensor Backward(const Tensor& dy) override {
    Tensor dctx = LinearBackward(dy, ctx_, *wo_);
    Tensor dq = Tensor::Empty(q_.shape(), dy.dtype(), dy.device()), dk = Tensor::Empty(k_.shape(), dy.dtype(), dy.device());
    Tensor dv = Tensor::Empty(v_.shape(), dy.dtype(), dy.device());
    kernels::AttentionBackward(q_, k_, v_, ctx_, dctx, lse_, batch_, seq_, heads_, rotary_.scale, dq, dk, dv);
    kernels::RopeBackward(dq, seq_, heads_, 0, rotary_.inv_freq, kernels::RopeLayout::kHalfSplit);
    kernels::RopeBackward(dk, seq_, heads_, 0, rotary_.inv_freq, kernels::RopeLayout::kHalfSplit);
    const int64_t hd = heads_ * head_dim_;
    Tensor dqkv = Tensor::Empty({dy.dim(0), 3 * hd}, dy.dtype(), dy.device());
    kernels::CopyColumns(dq, 0, dqkv, 0, hd);
    kernels::CopyColumns(dk, 0, dqkv, hd, hd);
    kernels::CopyColumns(dv, 0, dqkv, 2 * hd, hd);
    Tensor dx = LinearBackward(dqkv, x_, *wqkv_);
    x_ = q_ = k_ = v_ = ctx_ = lse_ = Tensor();
    return dx;
  }

 private:
  int64_t heads_, head_dim_;
  Rotary rotary_;
  Param* wqkv_;  // [3h, h]
  Param* wo_;    // [h, h]
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_, q_, k_, v_, ctx_, lse_;
};

// DeepSeek's multi-head latent attention (deepseek-v3-architecture.md): q through a low-rank latent
// with its RMSNorm (or one projection when q_lora_rank = 0); one joint kv down-projection holding the
// kv latent (RMSNorm) and ONE rotary key shared by every head; per head q = [nope; rope] and
// k = [k_nope; k_rope], values of their own size; pairwise RoPE on the rope dims; the tiled attention.
// Parameter names and shapes are the released weights' (q_a_proj, q_a_layernorm, q_b_proj | q_proj,
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj).
class MlaAttention final : public AttentionLayer {
 public:
  MlaAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed, double out_std,
               const AttentionContext& ctx)
      : a_(cfg.attention), heads_(cfg.num_heads),
        rotary_(MakeRotary(cfg, cfg.attention.qk_rope_head_dim, cfg.attention.qk_head_dim(), ctx)) {
    const int64_t h = cfg.hidden_size, dqk = a_.qk_head_dim();
    if (a_.q_lora_rank > 0) {
      q_a_ = params.Add(prefix + ".q_a_proj", {a_.q_lora_rank, h}, seed, cfg.init_std);
      q_norm_ = std::make_unique<RmsNorm>(params, prefix + ".q_a_layernorm", a_.q_lora_rank, cfg.norm_eps, seed);
      q_b_ = params.Add(prefix + ".q_b_proj", {heads_ * dqk, a_.q_lora_rank}, seed, cfg.init_std);
    } else {
      q_b_ = params.Add(prefix + ".q_proj", {heads_ * dqk, h}, seed, cfg.init_std);
    }
    kv_a_ = params.Add(prefix + ".kv_a_proj_with_mqa", {a_.kv_lora_rank + a_.qk_rope_head_dim, h}, seed, cfg.init_std);
    kv_norm_ = std::make_unique<RmsNorm>(params, prefix + ".kv_a_layernorm", a_.kv_lora_rank, cfg.norm_eps, seed);
    kv_b_ = params.Add(prefix + ".kv_b_proj", {heads_ * (a_.qk_nope_head_dim + a_.v_head_dim), a_.kv_lora_rank}, seed,
                       cfg.init_std);
    o_ = params.Add(prefix + ".o_proj", {h, heads_ * a_.v_head_dim}, seed, out_std);
  }

  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) override {
    batch_ = batch;
    seq_ = seq_len;
    x_ = x;
    ProjectQuery(x, seq_len);
    ProjectKeysValues(x, seq_len);
    out_ = Tensor::Empty(v_.shape(), x.dtype(), x.device());
    lse_ = LseFor(q_, batch * heads_ * seq_len);
    kernels::AttentionForward(q_, k_, v_, batch, seq_len, heads_, rotary_.scale, out_, lse_);
    return Linear(out_, o_->compute);
  }

  Tensor Backward(const Tensor& dy) override {
    Tensor dout = LinearBackward(dy, out_, *o_);
    Tensor dq = Tensor::Empty(q_.shape(), dy.dtype(), dy.device()), dk = Tensor::Empty(k_.shape(), dy.dtype(), dy.device());
    Tensor dv = Tensor::Empty(v_.shape(), dy.dtype(), dy.device());
    kernels::AttentionBackward(q_, k_, v_, out_, dout, lse_, batch_, seq_, heads_, rotary_.scale, dq, dk, dv);
    Tensor dx = KeysValuesBackward(dk, dv);
    kernels::Add(dx, dx, QueryBackward(dq));
    x_ = cq_ = q_ = ckv_ = k_ = v_ = out_ = lse_ = Tensor();
    return dx;
  }

 private:
  // q [T, H * dqk]: each head's rope dims rotated in place.
  void ProjectQuery(const Tensor& x, int64_t seq_len) {
    if (q_a_ != nullptr) {
      cq_ = q_norm_->Forward(Linear(x, q_a_->compute));
      q_ = Linear(cq_, q_b_->compute);
    } else {
      q_ = Linear(x, q_b_->compute);
    }
    kernels::RopeForward(q_, seq_len, heads_, a_.qk_nope_head_dim, rotary_.inv_freq, kernels::RopeLayout::kPairs);
  }

  // The joint down-projection [T, r_kv + d_r] splits into the kv latent (normed, then up-projected to
  // every head's k_nope and v) and the one rotary key, rotated and given to every head.
  void ProjectKeysValues(const Tensor& x, int64_t seq_len) {
    const int64_t t = x.dim(0), r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim, dn = a_.qk_nope_head_dim;
    const int64_t dqk = a_.qk_head_dim(), dv = a_.v_head_dim;
    Tensor a = Linear(x, kv_a_->compute);
    Tensor latent = Tensor::Empty({t, r}, x.dtype(), x.device()), k_rope = Tensor::Empty({t, dr}, x.dtype(), x.device());
    kernels::CopyColumns(a, 0, latent, 0, r);
    kernels::CopyColumns(a, r, k_rope, 0, dr);
    kernels::RopeForward(k_rope, seq_len, 1, 0, rotary_.inv_freq, kernels::RopeLayout::kPairs);
    ckv_ = kv_norm_->Forward(latent);
    Tensor kv = Linear(ckv_, kv_b_->compute);  // [T, H * (dn + dv)]
    k_ = Tensor::Empty({t, heads_ * dqk}, x.dtype(), x.device());
    v_ = Tensor::Empty({t, heads_ * dv}, x.dtype(), x.device());
    const Tensor kv_heads = kv.Reshape({t * heads_, dn + dv}), k_heads = k_.Reshape({t * heads_, dqk});
    kernels::CopyColumns(kv_heads, 0, k_heads, 0, dn);
    kernels::CopyColumns(k_rope, 0, k_heads, dn, dr, heads_);  // the shared rotary key, to every head
    kernels::CopyColumns(kv_heads, dn, v_.Reshape({t * heads_, dv}), 0, dv);
  }

  Tensor KeysValuesBackward(const Tensor& dk, const Tensor& dv) {
    const int64_t t = dk.dim(0), r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim, dn = a_.qk_nope_head_dim;
    const int64_t dqk = a_.qk_head_dim(), dvd = a_.v_head_dim;
    Tensor dkv = Tensor::Empty({t, heads_ * (dn + dvd)}, dk.dtype(), dk.device());
    const Tensor dkv_heads = dkv.Reshape({t * heads_, dn + dvd}), dk_heads = dk.Reshape({t * heads_, dqk});
    kernels::CopyColumns(dk_heads, 0, dkv_heads, 0, dn);
    kernels::CopyColumns(dv.Reshape({t * heads_, dvd}), 0, dkv_heads, dn, dvd);
    Tensor dk_rope = Tensor::Zeros({t, dr}, dk.dtype(), dk.device());
    kernels::SumColumns(dk_heads, dn, dk_rope, 0, dr, heads_);  // every head's share of the shared key
    kernels::RopeBackward(dk_rope, seq_, 1, 0, rotary_.inv_freq, kernels::RopeLayout::kPairs);
    Tensor dlatent = kv_norm_->Backward(LinearBackward(dkv, ckv_, *kv_b_));
    Tensor da = Tensor::Empty({t, r + dr}, dk.dtype(), dk.device());
    kernels::CopyColumns(dlatent, 0, da, 0, r);
    kernels::CopyColumns(dk_rope, 0, da, r, dr);
    return LinearBackward(da, x_, *kv_a_);
  }

  Tensor QueryBackward(const Tensor& dq) {
    kernels::RopeBackward(dq, seq_, heads_, a_.qk_nope_head_dim, rotary_.inv_freq, kernels::RopeLayout::kPairs);
    if (q_a_ == nullptr) return LinearBackward(dq, x_, *q_b_);
    Tensor dcq = q_norm_->Backward(LinearBackward(dq, cq_, *q_b_));
    return LinearBackward(dcq, x_, *q_a_);
  }

  const AttentionConfig a_;
  int64_t heads_;
  Rotary rotary_;
  Param* q_a_ = nullptr;  // [r_q, h] (null without q LoRA)
  std::unique_ptr<RmsNorm> q_norm_;
  Param* q_b_;            // [H * dqk, r_q], or q_proj [H * dqk, h]
  Param* kv_a_;           // [r_kv + d_r, h]
  std::unique_ptr<RmsNorm> kv_norm_;
  Param* kv_b_;           // [H * (dn + dv), r_kv]
  Param* o_;              // [h, H * dv]
  int64_t batch_ = 0, seq_ = 0;
  Tensor x_, cq_, q_, ckv_, k_, v_, out_, lse_;
};

}  // namespace

std::unique_ptr<AttentionLayer> MakeAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg,
                                              uint64_t seed, double out_std, const AttentionContext& ctx) {
  if (cfg.is_mla()) return std::make_unique<MlaAttention>(params, prefix, cfg, seed, out_std, ctx);
  return std::make_unique<MhaAttention>(params, prefix, cfg, seed, out_std, ctx);
}

// --- SwigluFfn -------------------------------------------------------------------------------------

SwigluFfn::SwigluFfn(ParamSet& params, const std::string& prefix, int64_t hidden, int64_t ffn, uint64_t seed, double std,
                     double out_std) {
  w13_ = params.Add(prefix + ".w13", {2 * ffn, hidden}, seed, std);
  w2_ = params.Add(prefix + ".w2", {hidden, ffn}, seed, out_std);
}

Tensor SwigluFfn::Forward(const Tensor& x) {
  x_ = x;
  gate_up_ = Linear(x, w13_->compute);
  act_ = Tensor::Empty({x.dim(0), w2_->compute.dim(1)}, x.dtype(), x.device());
  kernels::SwigluForward(gate_up_, act_);
  return Linear(act_, w2_->compute);
}

Tensor SwigluFfn::Backward(const Tensor& dy) {
  Tensor dact = LinearBackward(dy, act_, *w2_);
  Tensor dgu = Tensor::Empty(gate_up_.shape(), dy.dtype(), dy.device());
  kernels::SwigluBackward(gate_up_, dact, dgu);
  Tensor dx = LinearBackward(dgu, x_, *w13_);
  x_ = gate_up_ = act_ = Tensor();
  return dx;
}

// --- TransformerBlock ------------------------------------------------------------------------------

TransformerBlock::TransformerBlock(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, bool moe,
                                   uint64_t seed, double out_std, TokenDispatcher* dispatcher, DType routing_dtype,
                                   const AttentionContext& ctx) {
  const int64_t h = cfg.hidden_size;
  attn_norm_ = std::make_unique<RmsNorm>(params, prefix + ".attn_norm", h, cfg.norm_eps, seed);
  attn_ = MakeAttention(params, prefix + ".attn", cfg, seed, out_std, ctx);
  ffn_norm_ = std::make_unique<RmsNorm>(params, prefix + ".ffn_norm", h, cfg.norm_eps, seed);
  if (moe) {
    moe_ = std::make_unique<MoeLayer>(params, prefix + ".moe", cfg, seed, out_std, dispatcher, routing_dtype, ctx.device);
  } else {
    dense_ = std::make_unique<SwigluFfn>(params, prefix + ".ffn", h, cfg.dense_ffn_hidden, seed, cfg.init_std, out_std);
  }
}

StatusOr<Tensor> TransformerBlock::Forward(const Tensor& x, int64_t batch, int64_t seq_len, double aux_coeff,
                                           MoeStats* stats) {
  Tensor a = attn_->Forward(attn_norm_->Forward(x), batch, seq_len);
  Tensor x1 = Tensor::Empty(x.shape(), x.dtype(), x.device());
  kernels::Add(x1, x, a);
  Tensor u = ffn_norm_->Forward(x1);
  Tensor f;
  if (moe_) {
    MOE_ASSIGN_OR_RETURN(f, moe_->Forward(u, batch, seq_len, aux_coeff, stats));
  } else {
    f = dense_->Forward(u);
  }
  kernels::Add(f, f, x1);
  return f;
}

StatusOr<Tensor> TransformerBlock::Backward(const Tensor& dy) {
  Tensor df;
  if (moe_) {
    MOE_ASSIGN_OR_RETURN(df, moe_->Backward(dy));
  } else {
    df = dense_->Backward(dy);
  }
  Tensor dx1 = ffn_norm_->Backward(df);
  kernels::Add(dx1, dx1, dy);  // residual
  Tensor da = attn_norm_->Backward(attn_->Backward(dx1));
  kernels::Add(da, da, dx1);  // residual
  return da;
}

}  // namespace moe
