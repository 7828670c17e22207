// The attention of a block: MHA (fused qkv, half-split RoPE) and DeepSeek's MLA, both on the tiled
// attention kernel (or the materialised reference, training.attention), with what they keep for the
// backward per micro-batch and what they recompute.
#include "worker/engine/model/attention.h"

#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_materialized.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/latent_attention.h"
#include "kernels/rope.h"
#include "worker/engine/model/rope_freqs.h"
#include "worker/engine/parallel/step_profile.h"

namespace moe::model {

Tensor AttentionLayer::Decode(const Tensor& x, LayerKvCache& cache) {
  (void)x;
  (void)cache;
  MOE_CHECK(false) << "this attention decodes without a cache (cache_width() is 0)";
  return Tensor();
}

namespace {

// The rotary frequencies of a layer, on its device, and the softmax scale they imply.
struct Rotary {
  Tensor inv_freq;   // [rope_dim / 2]
  double scale = 1;  // 1/sqrt(d_qk), times YaRN's mscale^2
};

Rotary MakeRotary(const ModelConfig& cfg, int64_t rope_dim, int64_t qk_dim,
                  const AttentionContext& ctx) {
  const RopeFrequencies f =
      ComputeRopeFrequencies(cfg.rope_theta, rope_dim, cfg.rope_scaling, ctx.max_seq_len);
  Tensor host = Tensor::Empty({rope_dim / 2}, ctx.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  for (size_t j = 0; j < f.inv_freq.size(); ++j) {
    if (host.dtype() == DType::kF64)
      host.data<double>()[j] = f.inv_freq[j];
    else
      host.data<float>()[j] = static_cast<float>(f.inv_freq[j]);
  }
  return {ctx.device.is_cpu() ? host : host.Clone(ctx.device),
          f.scale_factor / std::sqrt(static_cast<double>(qk_dim))};
}

// The attention core on q, k, v, with what its backward needs (not kept under core_attn recompute):
// out and each row's log-sum-exp [B*H*S] (flash), or out and the probabilities [B*H, S, S]
// (materialized).
struct Core {
  Tensor out, lse, probs;
};

// The attention core's kernel and its constants (one per layer).
struct CoreSpec {
  int64_t heads = 0;
  double scale = 1;
  bool materialized = false;
};

Core RunCore(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch, int64_t seq,
             const CoreSpec& cs) {
  parallel::ProfilePhase phase("attention fwd");  // a recompute's too
  Core c{Tensor::Empty(v.shape(), v.dtype(), v.device()), Tensor(), Tensor()};
  if (cs.materialized) {
    c.probs = Tensor::Empty({batch * cs.heads, seq, seq}, AccumType(q.dtype()), q.device());
    kernels::MaterializedAttentionForward(q, k, v, batch, seq, cs.heads, cs.scale, c.out, c.probs);
  } else {
    c.lse = Tensor::Empty({batch * cs.heads * seq}, AccumType(q.dtype()), q.device());
    kernels::AttentionForward(q, k, v, batch, seq, cs.heads, cs.scale, c.out, c.lse);
  }
  return c;
}

// The core's backward: dq, dk, dv from dout.
struct CoreGrads {
  Tensor dq, dk, dv;
};

CoreGrads CoreBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Core& c,
                       const Tensor& dout, int64_t batch, int64_t seq, const CoreSpec& cs) {
  parallel::ProfilePhase phase("attention bwd");
  CoreGrads g{Tensor::Empty(q.shape(), dout.dtype(), dout.device()),
              Tensor::Empty(k.shape(), dout.dtype(), dout.device()),
              Tensor::Empty(v.shape(), dout.dtype(), dout.device())};
  if (cs.materialized) {
    kernels::MaterializedAttentionBackward(q, k, v, c.probs, dout, batch, seq, cs.heads, cs.scale,
                                           g.dq, g.dk, g.dv);
  } else {
    kernels::AttentionBackward(q, k, v, c.out, dout, c.lse, batch, seq, cs.heads, cs.scale, g.dq,
                               g.dk, g.dv);
  }
  return g;
}

// Multi-head attention with (half-split) RoPE on q and k: fused qkv projection, the tiled attention
// kernel, output projection.
class MhaAttention final : public AttentionLayer {
 public:
  MhaAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed,
               double out_std, const AttentionContext& ctx)
      : heads_(cfg.num_heads),
        head_dim_(cfg.head_dim()),
        recompute_core_(ctx.recompute.core_attn),
        rotary_(MakeRotary(cfg, cfg.head_dim(), cfg.head_dim(), ctx)),
        core_{heads_, rotary_.scale, ctx.materialized_attention} {
    const int64_t h = cfg.hidden_size;
    wqkv_ = params.Fp8Gemm(params.Add(prefix + ".wqkv", {3 * h, h}, seed, cfg.init_std));
    wo_ = params.Fp8Gemm(params.Add(prefix + ".wo", {h, h}, seed, out_std));
  }

  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) override {
    Saved s{x, Tensor(), Tensor(), Tensor(), {}, batch, seq_len};
    const int64_t t = x.dim(0), hd = heads_ * head_dim_;
    Tensor qkv = Linear(x, *wqkv_);
    s.q = Tensor::Empty({t, hd}, x.dtype(), x.device());
    s.k = Tensor::Empty({t, hd}, x.dtype(), x.device());
    s.v = Tensor::Empty({t, hd}, x.dtype(), x.device());
    kernels::CopyColumns(qkv, 0, s.q, 0, hd);
    kernels::CopyColumns(qkv, hd, s.k, 0, hd);
    kernels::CopyColumns(qkv, 2 * hd, s.v, 0, hd);
    kernels::RopeForward(s.q, seq_len, heads_, 0, rotary_.inv_freq,
                         kernels::RopeLayout::kHalfSplit);
    kernels::RopeForward(s.k, seq_len, heads_, 0, rotary_.inv_freq,
                         kernels::RopeLayout::kHalfSplit);
    Core core = RunCore(s.q, s.k, s.v, batch, seq_len, core_);
    Tensor y = Linear(core.out, *wo_);
    if (!recompute_core_) s.core = core;
    saved_.Push(std::move(s));
    return y;
  }

  Tensor Backward(const Tensor& dy) override {
    Saved s = saved_.Pop();
    if (recompute_core_) s.core = RunCore(s.q, s.k, s.v, s.batch, s.seq, core_);
    Tensor dctx = LinearBackward(dy, s.core.out, *wo_);
    CoreGrads g = CoreBackward(s.q, s.k, s.v, s.core, dctx, s.batch, s.seq, core_);
    kernels::RopeBackward(g.dq, s.seq, heads_, 0, rotary_.inv_freq,
                          kernels::RopeLayout::kHalfSplit);
    kernels::RopeBackward(g.dk, s.seq, heads_, 0, rotary_.inv_freq,
                          kernels::RopeLayout::kHalfSplit);
    const int64_t hd = heads_ * head_dim_;
    Tensor dqkv = Tensor::Empty({dy.dim(0), 3 * hd}, dy.dtype(), dy.device());
    kernels::CopyColumns(g.dq, 0, dqkv, 0, hd);
    kernels::CopyColumns(g.dk, 0, dqkv, hd, hd);
    kernels::CopyColumns(g.dv, 0, dqkv, 2 * hd, hd);
    return LinearBackward(dqkv, s.x, *wqkv_);
  }

 private:
  struct Saved {
    Tensor x, q, k, v;
    Core core;
    int64_t batch = 0, seq = 0;
  };
  int64_t heads_, head_dim_;
  bool recompute_core_;
  Rotary rotary_;
  CoreSpec core_;
  Param* wqkv_;  // [3h, h]
  Param* wo_;    // [h, h]
  SavedQueue<Saved> saved_;
};

// DeepSeek's multi-head latent attention (deepseek-v3-architecture.md): q through a low-rank latent
// with its RMSNorm (or one projection when q_lora_rank = 0); one joint kv down-projection holding
// the kv latent (RMSNorm) and ONE rotary key shared by every head; per head q = [nope; rope] and k
// = [k_nope; k_rope], values of their own size; pairwise RoPE on the rope dims; the tiled
// attention. Parameter names and shapes are the released weights' (q_a_proj, q_a_layernorm,
// q_b_proj | q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj). Under mla_up_proj
// recompute it keeps the two latents and the rotated shared key, not q, k and v.
class MlaAttention final : public AttentionLayer {
 public:
  MlaAttention(ParamSet& params, const std::string& prefix, const ModelConfig& cfg, uint64_t seed,
               double out_std, const AttentionContext& ctx)
      : a_(cfg.attention),
        heads_(cfg.num_heads),
        recompute_(ctx.recompute),
        rotary_(MakeRotary(cfg, cfg.attention.qk_rope_head_dim, cfg.attention.qk_head_dim(), ctx)),
        core_{heads_, rotary_.scale, ctx.materialized_attention} {
    const int64_t h = cfg.hidden_size, dqk = a_.qk_head_dim();
    if (a_.q_lora_rank > 0) {
      q_a_ =
          params.Fp8Gemm(params.Add(prefix + ".q_a_proj", {a_.q_lora_rank, h}, seed, cfg.init_std));
      q_norm_ = std::make_unique<RmsNorm>(params, prefix + ".q_a_layernorm", a_.q_lora_rank,
                                          cfg.norm_eps, seed);
      q_b_ = params.Fp8Gemm(
          params.Add(prefix + ".q_b_proj", {heads_ * dqk, a_.q_lora_rank}, seed, cfg.init_std));
    } else {
      q_b_ = params.Fp8Gemm(params.Add(prefix + ".q_proj", {heads_ * dqk, h}, seed, cfg.init_std));
    }
    kv_a_ =
        params.Fp8Gemm(params.Add(prefix + ".kv_a_proj_with_mqa",
                                  {a_.kv_lora_rank + a_.qk_rope_head_dim, h}, seed, cfg.init_std));
    kv_norm_ = std::make_unique<RmsNorm>(params, prefix + ".kv_a_layernorm", a_.kv_lora_rank,
                                         cfg.norm_eps, seed);
    kv_b_ = params.Fp8Gemm(params.Add(
        prefix + ".kv_b_proj", {heads_ * (a_.qk_nope_head_dim + a_.v_head_dim), a_.kv_lora_rank},
        seed, cfg.init_std));
    o_ = params.Fp8Gemm(params.Add(prefix + ".o_proj", {h, heads_ * a_.v_head_dim}, seed, out_std));
  }

  Tensor Forward(const Tensor& x, int64_t batch, int64_t seq_len) override {
    Saved s;
    s.x = x;
    s.batch = batch;
    s.seq = seq_len;
    s.cq = q_a_ != nullptr ? q_norm_->Forward(Linear(x, *q_a_)) : x;
    s.k_rope = KeyLatent(x, seq_len, &s.ckv);
    UpProject(&s);
    Core core = RunCore(s.q, s.k, s.v, batch, seq_len, core_);
    Tensor y = Linear(core.out, *o_);
    if (!recompute_.core_attn) s.core = core;
    if (recompute_.mla_up_proj) s.q = s.k = s.v = Tensor();
    saved_.Push(std::move(s));
    return y;
  }

  Tensor Backward(const Tensor& dy) override {
    Saved s = saved_.Pop();
    if (recompute_.mla_up_proj) UpProject(&s);
    if (recompute_.core_attn) s.core = RunCore(s.q, s.k, s.v, s.batch, s.seq, core_);
    Tensor dout = LinearBackward(dy, s.core.out, *o_);
    CoreGrads g = CoreBackward(s.q, s.k, s.v, s.core, dout, s.batch, s.seq, core_);
    Tensor dx = KeysValuesBackward(s, g.dk, g.dv);
    kernels::Add(dx, dx, QueryBackward(s, g.dq));
    return dx;
  }

  int64_t cache_width() const override { return a_.kv_lora_rank + a_.qk_rope_head_dim; }

  // DeepSeek-V3's inference with the up-projections absorbed: the new positions' latents and
  // rotated keys join the cache, each head's query is taken into the latent space through its
  // slice of kv_b (W_uk), the attention runs over the cache rows themselves
  // (kernels/latent_attention.h), and each head's latent output goes back out through its W_uv.
  Tensor Decode(const Tensor& x, LayerKvCache& cache) override {
    const int64_t n = x.dim(0), p0 = cache.length, r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim;
    MOE_CHECK(p0 + n <= cache.rows.dim(0) && cache.rows.dim(1) == r + dr)
        << "the decoding cache holds " << cache.rows.dim(0) << " positions of " << cache.rows.dim(1)
        << "; " << p0 << " + " << n << " of " << r + dr << " asked";
    Tensor ckv;
    Tensor k_rope = KeyLatent(x, n, &ckv, p0);
    const Tensor fresh = cache.rows.Rows(p0, p0 + n);
    kernels::CopyColumns(ckv, 0, fresh, 0, r);
    kernels::CopyColumns(k_rope, 0, fresh, r, dr);
    cache.length = p0 + n;
    Tensor q = Linear(q_a_ != nullptr ? q_norm_->Forward(Linear(x, *q_a_)) : x, *q_b_);
    kernels::RopeForward(q, n, heads_, a_.qk_nope_head_dim, rotary_.inv_freq,
                         kernels::RopeLayout::kPairs, p0);
    Tensor latent_out = Tensor::Empty({n, heads_ * r}, x.dtype(), x.device());
    kernels::LatentAttentionDecode(AbsorbQueries(q), cache.rows.Rows(0, cache.length), heads_, r,
                                   rotary_.scale, latent_out);
    return Linear(LiftValues(latent_out), *o_);
  }

 private:
  struct Saved {
    Tensor x, cq, ckv, k_rope;  // the input, the two latents (normed), the rotated shared key
    Tensor q, k, v;             // the heads (not kept under mla_up_proj recompute)
    Core core;                  // not kept under core_attn recompute
    int64_t batch = 0, seq = 0;
  };

  // Per head, [q_nope . W_uk; q_rope]: q [n, H * dqk] -> [n, H * (r + d_r)].
  Tensor AbsorbQueries(const Tensor& q) {
    const int64_t n = q.dim(0), r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim,
                  dn = a_.qk_nope_head_dim, dqk = a_.qk_head_dim(), dv = a_.v_head_dim;
    Tensor out = Tensor::Empty({n, heads_ * (r + dr)}, q.dtype(), q.device());
    Tensor nope = Tensor::Empty({n, dn}, q.dtype(), q.device()),
           absorbed = Tensor::Empty({n, r}, q.dtype(), q.device());
    for (int64_t h = 0; h < heads_; ++h) {
      kernels::CopyColumns(q, h * dqk, nope, 0, dn);
      const Tensor w_uk = kv_b_->compute.Rows(h * (dn + dv), h * (dn + dv) + dn);  // [dn, r]
      kernels::Gemm(nope, false, w_uk, false, absorbed);
      kernels::CopyColumns(absorbed, 0, out, h * (r + dr), r);
      kernels::CopyColumns(q, h * dqk + dn, out, h * (r + dr) + r, dr);
    }
    return out;
  }

  // Per head, the latent output through W_uv: [n, H * r] -> [n, H * dv].
  Tensor LiftValues(const Tensor& latent_out) {
    const int64_t n = latent_out.dim(0), r = a_.kv_lora_rank, dn = a_.qk_nope_head_dim,
                  dv = a_.v_head_dim;
    Tensor out = Tensor::Empty({n, heads_ * dv}, latent_out.dtype(), latent_out.device());
    Tensor head_latent = Tensor::Empty({n, r}, latent_out.dtype(), latent_out.device()),
           head_out = Tensor::Empty({n, dv}, latent_out.dtype(), latent_out.device());
    for (int64_t h = 0; h < heads_; ++h) {
      kernels::CopyColumns(latent_out, h * r, head_latent, 0, r);
      const Tensor w_uv = kv_b_->compute.Rows(h * (dn + dv) + dn, (h + 1) * (dn + dv));  // [dv, r]
      kernels::Gemm(head_latent, false, w_uv, true, head_out);
      kernels::CopyColumns(head_out, 0, out, h * dv, dv);
    }
    return out;
  }

  // The joint down-projection [T, r_kv + d_r]: the kv latent (normed, into *ckv) and the one rotary
  // key (rotated from position first_position on, returned).
  Tensor KeyLatent(const Tensor& x, int64_t seq_len, Tensor* ckv, int64_t first_position = 0) {
    const int64_t t = x.dim(0), r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim;
    Tensor a = Linear(x, *kv_a_);
    Tensor latent = Tensor::Empty({t, r}, x.dtype(), x.device()),
           k_rope = Tensor::Empty({t, dr}, x.dtype(), x.device());
    kernels::CopyColumns(a, 0, latent, 0, r);
    kernels::CopyColumns(a, r, k_rope, 0, dr);
    kernels::RopeForward(k_rope, seq_len, 1, 0, rotary_.inv_freq, kernels::RopeLayout::kPairs,
                         first_position);
    *ckv = kv_norm_->Forward(latent);
    return k_rope;
  }

  // The heads from the latents: q [T, H * dqk] (rope dims rotated), k [T, H * dqk] (k_nope from the
  // kv latent, the shared rotary key to every head), v [T, H * dv].
  void UpProject(Saved* s) {
    const int64_t t = s->x.dim(0), dn = a_.qk_nope_head_dim, dr = a_.qk_rope_head_dim,
                  dqk = a_.qk_head_dim();
    const int64_t dv = a_.v_head_dim;
    s->q = Linear(s->cq, *q_b_);
    kernels::RopeForward(s->q, s->seq, heads_, dn, rotary_.inv_freq, kernels::RopeLayout::kPairs);
    Tensor kv = Linear(s->ckv, *kv_b_);  // [T, H * (dn + dv)]
    s->k = Tensor::Empty({t, heads_ * dqk}, s->x.dtype(), s->x.device());
    s->v = Tensor::Empty({t, heads_ * dv}, s->x.dtype(), s->x.device());
    const Tensor kv_heads = kv.Reshape({t * heads_, dn + dv}),
                 k_heads = s->k.Reshape({t * heads_, dqk});
    kernels::CopyColumns(kv_heads, 0, k_heads, 0, dn);
    kernels::CopyColumns(s->k_rope, 0, k_heads, dn, dr,
                         heads_);  // the shared rotary key, to every head
    kernels::CopyColumns(kv_heads, dn, s->v.Reshape({t * heads_, dv}), 0, dv);
  }

  Tensor KeysValuesBackward(const Saved& s, const Tensor& dk, const Tensor& dv) {
    const int64_t t = dk.dim(0), r = a_.kv_lora_rank, dr = a_.qk_rope_head_dim,
                  dn = a_.qk_nope_head_dim;
    const int64_t dqk = a_.qk_head_dim(), dvd = a_.v_head_dim;
    Tensor dkv = Tensor::Empty({t, heads_ * (dn + dvd)}, dk.dtype(), dk.device());
    const Tensor dkv_heads = dkv.Reshape({t * heads_, dn + dvd}),
                 dk_heads = dk.Reshape({t * heads_, dqk});
    kernels::CopyColumns(dk_heads, 0, dkv_heads, 0, dn);
    kernels::CopyColumns(dv.Reshape({t * heads_, dvd}), 0, dkv_heads, dn, dvd);
    Tensor dk_rope = Tensor::Zeros({t, dr}, dk.dtype(), dk.device());
    kernels::SumColumns(dk_heads, dn, dk_rope, 0, dr,
                        heads_);  // every head's share of the shared key
    kernels::RopeBackward(dk_rope, s.seq, 1, 0, rotary_.inv_freq, kernels::RopeLayout::kPairs);
    Tensor dlatent = kv_norm_->Backward(LinearBackward(dkv, s.ckv, *kv_b_));
    Tensor da = Tensor::Empty({t, r + dr}, dk.dtype(), dk.device());
    kernels::CopyColumns(dlatent, 0, da, 0, r);
    kernels::CopyColumns(dk_rope, 0, da, r, dr);
    return LinearBackward(da, s.x, *kv_a_);
  }

  Tensor QueryBackward(const Saved& s, const Tensor& dq) {
    kernels::RopeBackward(dq, s.seq, heads_, a_.qk_nope_head_dim, rotary_.inv_freq,
                          kernels::RopeLayout::kPairs);
    if (q_a_ == nullptr) return LinearBackward(dq, s.x, *q_b_);
    Tensor dcq = q_norm_->Backward(LinearBackward(dq, s.cq, *q_b_));
    return LinearBackward(dcq, s.x, *q_a_);
  }

  const AttentionConfig a_;
  int64_t heads_;
  Recompute recompute_;
  Rotary rotary_;
  CoreSpec core_;
  Param* q_a_ = nullptr;  // [r_q, h] (null without q LoRA)
  std::unique_ptr<RmsNorm> q_norm_;
  Param* q_b_;   // [H * dqk, r_q], or q_proj [H * dqk, h]
  Param* kv_a_;  // [r_kv + d_r, h]
  std::unique_ptr<RmsNorm> kv_norm_;
  Param* kv_b_;  // [H * (dn + dv), r_kv]
  Param* o_;     // [h, H * dv]
  SavedQueue<Saved> saved_;
};

}  // namespace

std::unique_ptr<AttentionLayer> MakeAttention(ParamSet& params, const std::string& prefix,
                                              const ModelConfig& cfg, uint64_t seed, double out_std,
                                              const AttentionContext& ctx) {
  if (cfg.is_mla()) return std::make_unique<MlaAttention>(params, prefix, cfg, seed, out_std, ctx);
  return std::make_unique<MhaAttention>(params, prefix, cfg, seed, out_std, ctx);
}

}  // namespace moe::model
