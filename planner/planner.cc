#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "common/flops.h"
#include "common/pipeline_layout.h"

namespace moe {
namespace {

double D(int64_t v) { return static_cast<double>(v); }

// Per token and layer: Megatron's FLOPs terms (common/flops.h), fwd + bwd.
struct LayerFlops {
  double proj = 0, core = 0, dense_ffn = 0, routed = 0, shared = 0, mtp_proj = 0, logits = 0;
  double up_proj_fwd =
      0;  // MLA's q and kv up-projections, forward only (what mla_up_proj recomputes)
};

LayerFlops PerLayerFlops(const ModelConfig& m, int64_t seq) {
  ModelConfig one = m;
  one.num_layers = 1;
  one.first_k_dense = 0;
  one.mtp_depth = 0;
  const FlopsBreakdown f = MegatronFlops(one, 1, seq);
  const double h = D(m.hidden_size), s = D(seq);
  LayerFlops l;
  l.proj = f.attn_proj / s;
  l.core = f.attn_core / s;
  l.dense_ffn = 18 * h * D(m.dense_ffn_hidden);
  l.routed = 18 * h * D(m.moe.ffn_hidden * m.moe.top_k);
  l.shared = 18 * h * D(m.moe.ffn_hidden * m.moe.num_shared_experts);
  l.mtp_proj = 6 * (3 * h + 2 * h * h);
  l.logits = 6 * h * D(PaddedVocab(m.vocab_size));
  if (m.is_mla()) {
    const AttentionConfig& a = m.attention;
    const double heads = D(m.num_heads);
    l.up_proj_fwd = 2 * D(a.kv_lora_rank) * heads * D(a.qk_nope_head_dim + a.v_head_dim);
    if (a.q_lora_rank > 0) l.up_proj_fwd += 2 * D(a.q_lora_rank) * heads * D(a.qk_head_dim());
  }
  return l;
}

// Everything the step model needs, fixed for one plan.
struct Ctx {
  const JobSpec* spec = nullptr;
  const ClusterProfile* c = nullptr;
  const SoftwareProfile* s = nullptr;
  LayerFlops f;
  std::string precision;
  int64_t tp = 1;        // tensor parallelism (PlanOptions::tensor_parallel)
  double tokens = 0;     // per micro-batch and rank (a TP rank's share under sequence parallelism)
  double a = 2;          // activation bytes
  double gemm_rate = 0;  // FLOP/s of a large dense GEMM
  double attn_rate = 0;  // FLOP/s of the attention core
  double expert_rate = 0;  // FLOP/s of the grouped expert GEMM at this rows-per-expert
  double mem_rate = 0;     // bytes/s of memory-bound passes
  double rows_per_expert = 0;
  double cross_share = 0;  // of the all-to-all bytes leaving the rank, the share leaving the domain
  // Of the all-to-all bytes leaving the rank, the share that crosses the scale-up link: those for
  // ranks in its domain, and those that leave it, forwarded in the destination's domain (DeepEP's
  // NVLink forward, NCCL's PXN) unless they land on their own destination (1 in n for n ranks of
  // the group there). 1 when the group is in one domain.
  double in_domain_share = 1, forwarded_share = 0;
  bool rc_mlp = false, rc_up = false, rc_core = false, rc_act = false, rc_full = false;
};

// Seconds per micro-batch on one pipeline rank, by component (fwd + bwd).
struct RankTime {
  double dense = 0, experts = 0, core = 0, recompute = 0, memory = 0, a2a_in = 0, a2a_cross = 0,
         tp = 0, host = 0;
  double total() const {
    return dense + experts + core + recompute + memory + a2a_in + a2a_cross + tp + host;
  }
  void Add(const RankTime& o) {
    dense += o.dense, experts += o.experts, core += o.core, recompute += o.recompute;
    memory += o.memory, a2a_in += o.a2a_in, a2a_cross += o.a2a_cross, tp += o.tp, host += o.host;
  }
};

// Bytes of the quantisation passes per token (fp8): each GEMM input and output gradient read in
// bf16 and written in fp8 row- and column-wise (4 B per element), or only written when the producer
// quantises (2 B).
double QuantBytes(const Ctx& x, bool moe) {
  if (x.precision != "fp8") return 0;
  const ModelConfig& m = x.spec->model;
  const double h = D(m.hidden_size), heads = D(m.num_heads);
  double width = 0;
  if (m.is_mla()) {
    const AttentionConfig& a = m.attention;
    const double rq = D(a.q_lora_rank), rkv = D(a.kv_lora_rank);
    width = h + rq + rkv + heads * D(a.v_head_dim);  // inputs
    width += rq + heads * D(a.qk_head_dim()) + rkv + D(a.qk_rope_head_dim) +
             heads * D(a.qk_nope_head_dim + a.v_head_dim) + h;  // output grads
  } else {
    width = h + heads * D(m.head_dim()) + 3 * heads * D(m.head_dim()) + h;
  }
  const double f = D(moe ? m.moe.ffn_hidden : m.dense_ffn_hidden);
  const double rows = moe ? D(m.moe.top_k + m.moe.num_shared_experts) : 1;
  width += rows * (2 * h + 3 * f);
  double bytes = width * (x.s->Fused("quantization") ? 2 : 4);
  if (x.s->Fused("norm_quantization")) bytes -= 2 * h * 2;  // the two norms write fp8 themselves
  return std::max(bytes, 0.0);
}

// Memory-bound bytes per token of one block (fwd + bwd; docs/planning.md lists the passes).
double BlockMemoryBytes(const Ctx& x, bool moe) {
  const ModelConfig& m = x.spec->model;
  const double h = D(m.hidden_size), a = x.a, heads = D(m.num_heads);
  const double rope = m.is_mla() ? D(m.attention.qk_rope_head_dim) : D(m.head_dim());
  double b = 2 * 5 * h * a + 4 * 3 * h * a + 4 * (heads + 1) * rope * a;  // norms, residuals, RoPE
  if (x.rc_up && m.is_mla()) {  // the up-projections' output written again, RoPE'd and concatenated
    b += 3 * heads * D(2 * m.attention.qk_head_dim() + m.attention.v_head_dim) * a;
  }
  const double f = D(moe ? m.moe.ffn_hidden : m.dense_ffn_hidden);
  const double rows = moe ? D(m.moe.top_k + m.moe.num_shared_experts) : 1;
  b += rows * f * a * (8 + (x.rc_act || x.rc_full ? 3 : 0));  // SwiGLU fwd 3f, bwd 5f (+ recompute)
  if (moe) {
    const double k = D(m.moe.top_k), e = D(m.moe.num_experts);
    b +=
        4 * 2 * k * h * a * (x.s->Fused("permute") ? 1 : 2);  // permute, unpermute, their backwards
    b += e * 4 * (x.s->Fused("router") ? 3 : 12);  // sigmoid, bias, group top-k, normalise
  }
  return b + QuantBytes(x, moe);
}

// The loss's memory passes per token: the fp32 logits, read and written per pass.
double LossMemoryBytes(const Ctx& x) {
  return D(PaddedVocab(x.spec->model.vocab_size)) * 4 * (x.s->Fused("cross_entropy") ? 2 : 6);
}

// Kernels a missing fusion adds per layer and micro-batch (fwd + bwd), by part: an unfused permute
// (index sort, gather, probs multiply, scatter), an unfused router (sigmoid, bias, group top-k,
// mask, top-k, gather, normalise, scale, their backwards), separate quantisation kernels (one per
// GEMM input and output gradient), the norm's own quantisation kernel.
struct FusionKernels {
  int64_t dispatch = 0, router = 0, attention = 0, experts = 0, ffn = 0;
};
FusionKernels UnfusedKernels(const Ctx& x) {
  FusionKernels k;
  if (!x.s->Fused("permute")) k.dispatch += 16;
  if (!x.s->Fused("router")) k.router += 24;
  if (x.precision == "fp8" && !x.s->Fused("quantization"))
    k.attention += 10, k.experts += 8, k.ffn += 4;
  if (x.precision == "fp8" && !x.s->Fused("norm_quantization")) k.attention += 4;
  return k;
}

double HostSeconds(const Ctx& x, bool moe) {
  const HostProfile& h = x.s->host;
  const FusionKernels extra = UnfusedKernels(x);
  auto part = [&](const char* name, int64_t kernels) {
    const bool captured =
        x.s->Captured(name) && (std::string(name) != "experts" || h.syncs_per_moe_layer == 0);
    return captured ? 2 * h.graph_launch_us : D(kernels) * h.launch_us;
  };
  double us = part("attention",
                   h.attention_kernels + extra.attention + (x.rc_up ? h.attention_kernels / 6 : 0));
  if (moe) {
    us += part("router", h.router_kernels + extra.router) +
          part("dispatch", h.dispatch_kernels + extra.dispatch) +
          part("experts", h.experts_kernels + extra.experts) +
          part("shared_expert", h.shared_expert_kernels + extra.ffn) +
          D(h.syncs_per_moe_layer) * h.sync_us;
  } else {
    us += part("dense_ffn",
               h.dense_ffn_kernels + extra.ffn + (x.rc_mlp ? h.dense_ffn_kernels / 3 : 0));
  }
  if (x.rc_full) us *= 4.0 / 3.0;  // the forward's launches again
  return us * 1e-6;
}

// Tensor parallelism's collectives per layer and micro-batch (Megatron-Core with sequence
// parallelism): an all-gather of the input and a reduce-scatter of the output around attention and
// around the dense FFN or the shared experts (the routed experts, expert TP 1, take the tokens as
// sequence parallelism leaves them), forward and backward, each moving (TP - 1)/TP of the whole
// micro-batch's activations; the recomputed forward of `full` again. In the domain, not overlapped.
double TpSeconds(const Ctx& x, bool moe) {
  if (x.tp <= 1) return 0;
  const ModelConfig& m = x.spec->model;
  const double whole = x.tokens * D(x.tp) * D(m.hidden_size) * x.a;  // the micro-batch's x
  const double per_collective = whole * D(x.tp - 1) / D(x.tp);
  double collectives = 4;                                      // attention, fwd + bwd
  if (!moe || m.moe.num_shared_experts > 0) collectives += 4;  // dense FFN / shared experts
  if (x.rc_full) collectives *= 1.5;                           // the forward's again
  return collectives * per_collective / (x.c->scale_up_gbps * 1e9 * x.s->cross_domain_efficiency);
}

RankTime BlockTime(const Ctx& x, bool moe) {
  const ModelConfig& m = x.spec->model;
  const LayerFlops& f = x.f;
  const double t = x.tokens;
  RankTime r;
  const double dense = f.proj + (moe ? f.shared : f.dense_ffn);
  r.dense = t * dense / x.gemm_rate;
  r.core = t * f.core / x.attn_rate;
  const double busiest = x.spec->parallelism.expert_parallel > 1 ? x.s->expert_imbalance : 1.0;
  if (moe) r.experts = busiest * t * f.routed / x.expert_rate;
  double rec_gemm = 0, rec_exp = 0, rec_core = 0;
  if (x.rc_full) {
    rec_gemm = dense / 3, rec_exp = moe ? f.routed / 3 : 0, rec_core = f.core / 3;
  } else {
    if (x.rc_up) rec_gemm += f.up_proj_fwd;
    if (x.rc_mlp && !moe) rec_gemm += f.dense_ffn / 3;
    if (x.rc_core) rec_core += f.core / 3;
  }
  r.recompute =
      t * (rec_gemm / x.gemm_rate + busiest * rec_exp / x.expert_rate + rec_core / x.attn_rate);
  r.memory = t * BlockMemoryBytes(x, moe) / x.mem_rate;
  if (moe && x.spec->parallelism.expert_parallel > 1) {
    const double ep = D(x.spec->parallelism.expert_parallel);
    const double dispatch = x.precision == "fp8" && x.s->fp8_dispatch ? 1 : x.a;
    const double leaving =
        t * D(m.moe.top_k) * D(m.hidden_size) * (dispatch + 3 * x.a) * (ep - 1) / ep;
    const double exposed = 1 - x.s->a2a_overlap;
    r.a2a_in = exposed * leaving * x.in_domain_share /
               (x.c->scale_up_gbps * 1e9 * x.s->DispatcherEfficiency());
    r.a2a_cross = exposed * leaving * x.cross_share /
                  (x.c->scale_out_gbps * 1e9 * x.s->cross_domain_efficiency);
  }
  r.tp = TpSeconds(x, moe);
  r.host = HostSeconds(x, moe);
  return r;
}

// One virtual stage's blocks, MTP depths and loss, one micro-batch.
RankTime StageTime(const Ctx& x, const StageLayout& st) {
  const ModelConfig& m = x.spec->model;
  RankTime r;
  for (int64_t l = st.first_layer; l < st.first_layer + st.num_layers; ++l)
    r.Add(BlockTime(x, m.IsMoeLayer(l)));
  const int64_t heads = (st.loss ? 1 : 0) + (m.MtpTrains() ? st.mtp : 0);
  for (int64_t d = 0; d < (m.MtpTrains() ? st.mtp : 0); ++d) {
    r.Add(BlockTime(x, m.MtpIsMoe()));
    r.dense += x.tokens * x.f.mtp_proj / x.gemm_rate;
  }
  r.dense += D(heads) * x.tokens * x.f.logits / x.gemm_rate;
  r.memory += D(heads) * x.tokens * LossMemoryBytes(x) / x.mem_rate;
  return r;
}

// How the job's ranks sit in scale-up domains (Megatron's order: EP innermost, then DP, then PP).
struct Packing {
  int64_t racks = 1, per_domain = 1, ep_domains = 1;
};

StatusOr<Packing> Pack(const JobSpec& spec, const ClusterProfile& c, const PlanOptions& o) {
  const int64_t w = spec.parallelism.world_size, ep = spec.parallelism.expert_parallel;
  const int64_t tp = std::max<int64_t>(o.tensor_parallel, 1);
  Packing p;
  if (o.racks > 0) {
    p.racks = o.racks;
    p.per_domain = (w + o.racks - 1) / o.racks;
    if (p.per_domain > c.domain_size) {
      return InvalidArgumentError(
          "--racks " + std::to_string(o.racks) + ": " + std::to_string(o.racks) + " domains of " +
          std::to_string(c.domain_size) + " devices hold fewer than the job's " +
          std::to_string(w) + " ranks");
    }
  } else {
    p.per_domain = std::min(c.domain_size, w);
    // EP groups (and TP groups) do not straddle domains.
    const int64_t unit = std::lcm(ep, tp) <= p.per_domain ? std::lcm(ep, tp) : tp;
    if (unit <= p.per_domain) p.per_domain = p.per_domain / unit * unit;
    p.racks = (w + p.per_domain - 1) / p.per_domain;
  }
  p.ep_domains = ep <= p.per_domain ? 1 : (ep + p.per_domain - 1) / p.per_domain;
  if (o.ep_domains > 0) {
    if (o.ep_domains > ep || o.ep_domains > p.racks) {
      return InvalidArgumentError(
          "--ep-domains " + std::to_string(o.ep_domains) + ": an expert-parallel group of " +
          std::to_string(ep) + " ranks over " + std::to_string(p.racks) +
          " domain(s) spans at most " + std::to_string(std::min(ep, p.racks)));
    }
    p.ep_domains = o.ep_domains;
  }
  return p;
}

// Of the dispatch bytes leaving a rank, the share that leaves its domain: (D - 1) / D of the
// destinations are elsewhere; group-limited routing (topk_groups of num_groups groups, groups laid
// on domains) sends a token to at most topk_groups groups, once per domain (DeepEP's node-limited
// dedup).
double CrossShare(const ModelConfig& m, int64_t ep_domains) {
  if (ep_domains <= 1) return 0;
  double share = (D(ep_domains) - 1) / D(ep_domains);
  if (m.moe.num_groups > 1 && m.moe.topk_groups < m.moe.num_groups) {
    share = std::min(share, D(m.moe.topk_groups) / D(m.moe.num_groups));
  }
  return share;
}

Status MakeCtx(const JobSpec& spec, const ClusterProfile& c, const SoftwareProfile& s,
               const Packing& pk, int64_t tp, Ctx* x) {
  x->spec = &spec, x->c = &c, x->s = &s;
  x->precision = JobPrecision(spec);
  x->a = c.device == "cpu" ? 4 : 2;
  x->f = PerLayerFlops(spec.model, spec.data.seq_length);
  x->tp = tp;
  x->tokens = D(spec.data.micro_batch_size * spec.data.seq_length) / D(tp);
  const double peak = c.peak_tflops(x->precision) * 1e12;
  x->gemm_rate = peak * s.gemm_efficiency * s.sm_share;
  x->attn_rate = c.peak_bf16_tflops * 1e12 * s.attention_efficiency * s.sm_share;
  const MoeConfig& e = spec.model.moe;
  x->rows_per_expert =
      e.num_experts > 0
          ? x->tokens * D(e.top_k) * D(spec.parallelism.expert_parallel) / D(e.num_experts)
          : 0;
  x->expert_rate =
      x->gemm_rate * x->rows_per_expert / (x->rows_per_expert + s.grouped_gemm_half_rows);
  x->mem_rate = c.memory_tbps * 1e12 * s.memory_efficiency;
  x->cross_share = CrossShare(spec.model, pk.ep_domains);
  if (pk.ep_domains > 1) {
    const int64_t ep = spec.parallelism.expert_parallel;
    const double leaves = (D(pk.ep_domains) - 1) / D(pk.ep_domains);   // of the destinations
    const double there = D((ep + pk.ep_domains - 1) / pk.ep_domains);  // group ranks per domain
    x->forwarded_share = leaves * (there - 1) / there;
    x->in_domain_share = (1 - leaves) + x->forwarded_share;
  }
  for (const std::string& r : spec.training.recompute) {
    x->rc_mlp |= r == "mlp", x->rc_up |= r == "mla_up_proj", x->rc_core |= r == "core_attn";
    x->rc_act |= r == "moe_act", x->rc_full |= r == "full";
  }
  return OkStatus();
}

std::string Gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f GB", bytes / 1e9);
  return b;
}

void MemoryVerdict(Plan* p) {
  const StageMemory& big = p->memory.largest();
  p->fits = big.peak() <= p->capacity_bytes;
  if (p->fits) {
    p->memory_verdict = "fits: pipeline rank " + std::to_string(big.pp_rank) + " peaks at " +
                        Gb(big.peak()) + " of " + Gb(p->capacity_bytes);
    return;
  }
  size_t top = 0;
  for (size_t k = 1; k < kNumMemoryKinds; ++k) top = big.bytes[k] > big.bytes[top] ? k : top;
  p->memory_verdict = "does not fit: pipeline rank " + std::to_string(big.pp_rank) + " needs " +
                      Gb(big.peak()) + " of " + Gb(p->capacity_bytes) + "; " +
                      MemoryKindName(static_cast<MemoryKind>(top)) + " overflow (" +
                      Gb(big.bytes[top]) + ", the largest category)";
}

// Bandwidth of a collective over `group` ranks at consecutive positions `stride` apart.
double GroupRate(const Ctx& x, const Packing& pk, int64_t group, int64_t stride) {
  const bool crosses = group * stride > pk.per_domain;
  return (crosses ? x.c->scale_out_gbps : x.c->scale_up_gbps) * 1e9 * x.s->cross_domain_efficiency;
}

// The steps after the pipeline: sends, gradient reduce-scatter + weight all-gather, the optimizer.
void AddTail(const Ctx& x, const Packing& pk, const StageMemory& st, Plan* p) {
  const ParallelismConfig& par = x.spec->parallelism;
  const double m = D(p->micro_batches), v = D(par.virtual_pipeline);
  if (par.pipeline_parallel > 1) {
    const double bytes =
        2 * v * m * x.tokens * D(x.spec->model.hidden_size) * x.a;  // activations out, grads back
    const double rate = GroupRate(x, pk, 2, par.data_parallel());
    p->components.push_back({"pipeline sends", (1 - x.s->p2p_overlap) * bytes / rate,
                             std::to_string(static_cast<int64_t>(2 * v * m)) + " sends of " +
                                 Gb(x.tokens * D(x.spec->model.hidden_size) * x.a)});
  }
  // The dense data-parallel group is DP / TP ranks TP apart (this rank's TP share of the dense
  // weights); the experts' is DP / EP ranks EP apart.
  const int64_t dense_dp = par.data_parallel() / x.tp;
  const double dp = D(dense_dp), edp = D(par.expert_data_parallel());
  // Gradients out (fp32; f64 under training.deterministic), then weights back (all-gathered under
  // ZeRO, else the all-reduce's second half: the gradients again).
  const bool exact = x.spec->training.Deterministic(x.c->device == "cpu");
  const double grad = exact ? 8 : 4;
  const double dense = st.params - st.expert_params,
               wire = grad + (p->memory.distributed_optimizer ? x.a : grad);
  double t = 0;
  if (dp > 1) t += dense * wire * (dp - 1) / dp / GroupRate(x, pk, dense_dp, x.tp);
  if (edp > 1)
    t += st.expert_params * wire * (edp - 1) / edp /
         GroupRate(x, pk, par.expert_data_parallel(), par.expert_parallel);
  if (t > 0) {
    p->components.push_back({"data-parallel grads + weights", (1 - x.s->dp_overlap) * t,
                             "reduce-scatter + all-gather, " +
                                 std::to_string(static_cast<int64_t>(100 * x.s->dp_overlap)) +
                                 "% overlapped"});
  }
  const bool zero = p->memory.distributed_optimizer;
  const double shard = zero ? dense / dp + st.expert_params / edp : st.params;
  p->components.push_back(
      {"optimizer", shard * 30 / x.mem_rate, "AdamW over this rank's shard (30 B per parameter)"});
}

std::string Pct(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.0f%%", 100 * v);
  return b;
}

// Per-component rows of the pipeline: m micro-batches on the slowest rank, then its bubble.
void AddPipeline(const Ctx& x, const std::vector<RankTime>& ranks, Plan* p) {
  const ParallelismConfig& par = x.spec->parallelism;
  size_t slow = 0;
  double mean = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    mean += ranks[r].total() / D(static_cast<int64_t>(ranks.size()));
    if (ranks[r].total() > ranks[slow].total()) slow = r;
  }
  const RankTime& s = ranks[slow];
  const double m = D(p->micro_batches), pp = D(par.pipeline_parallel), v = D(par.virtual_pipeline);
  const std::string prec = x.precision;
  auto row = [&](const char* name, double per_mb, const std::string& detail) {
    p->components.push_back({name, m * per_mb, detail});
  };
  row("dense GEMMs", s.dense,
      prec + " at " + Pct(x.s->gemm_efficiency * x.s->sm_share) + " of peak");
  row("routed experts", s.experts,
      "grouped " + prec + ", " + std::to_string(static_cast<int64_t>(x.rows_per_expert)) +
          " rows per expert");
  row("attention core", s.core,
      "bf16 flash attention at " + Pct(x.s->attention_efficiency * x.s->sm_share));
  row("recompute", s.recompute,
      x.spec->training.recompute.empty() ? "none" : "the recomputed forwards");
  row("memory-bound passes", s.memory,
      "at " + Pct(x.s->memory_efficiency) + " of memory bandwidth");
  row("all-to-all in domain", s.a2a_in,
      x.s->dispatcher + ", " + Pct(x.s->a2a_overlap) + " overlapped" +
          (x.forwarded_share > 0 ? ", incl. " + Pct(x.forwarded_share) +
                                       " of the leaving bytes forwarded on their way across domains"
                                 : std::string()));
  row("all-to-all across domains", s.a2a_cross, Pct(x.cross_share) + " of the leaving bytes cross");
  if (x.tp > 1) {
    row("tensor-parallel collectives", s.tp,
        "TP" + std::to_string(x.tp) +
            " all-gather + reduce-scatter per layer in the domain, not overlapped");
  }
  row("host launches + syncs", s.host,
      std::to_string(x.s->host.cuda_graphs.size()) + " part(s) in CUDA graphs");
  double bubble = (pp - 1) / v * mean;
  if (x.s->pipeline_schedule == "dualpipe")
    bubble = std::max(pp / 2 - 1, 0.0) * (2.0 / 3.0) * mean / v;
  p->components.push_back({"pipeline bubble", bubble,
                           x.s->pipeline_schedule + ", p=" + std::to_string(par.pipeline_parallel) +
                               " v=" + std::to_string(par.virtual_pipeline) +
                               " m=" + std::to_string(p->micro_batches)});
  p->bubble_fraction = bubble / (bubble + m * s.total());
}

// The peak the plan's MFU is against, and the one a run of this engine counts its MFU against: a
// live job's own (RunMfu), else which it will measure.
void StatePeaks(const Ctx& x, const PlanOptions& o, Plan* p) {
  const ClusterProfile& c = *x.c;
  p->peak_tflops = c.peak_bf16_tflops;
  if (c.device == "cpu") {
    std::string measured;
    for (const std::string& s : c.sources) {
      if (s.find("SGEMM") != std::string::npos || s.rfind("one rank's share", 0) == 0)
        measured += (measured.empty() ? "" : "; ") + s;
    }
    p->peak_source = c.name + "'s fp32 peak, the SGEMM rate its profile was measured at" +
                     (measured.empty() ? std::string() : " (" + measured + ")");
    p->run_peak_note =
        "a run counts its MFU against the SGEMM rate each rank measures with its own threads "
        "(moe-train; a worker's --peak-cache), not a share of the machine's: moectl plan JOB of a "
        "running job states this plan's MFU against that peak";
  } else {
    p->peak_source = c.name + "'s dense bf16 peak (the datasheet figure in its profile)";
    p->run_peak_note =
        "a run of this engine counts its MFU against the bf16 GEMM rate it measures on its GPU "
        "(cuBLAS 8192^3), below the datasheet's, so its MFU reads higher for the same TFLOP/s";
  }
  if (o.run_mfu.has_value() && o.run_mfu->peak_tflops > 0) {
    p->run_mfu = o.run_mfu;
    p->mfu_run_peak = p->tflops_per_gpu / o.run_mfu->peak_tflops;
    p->run_peak_note.clear();
  }
}

void Summarise(const Ctx& x, const PlanOptions& o, Plan* p) {
  double step = 0;
  for (const auto& c : p->components) step += c.seconds;
  if (x.s->goodput < 1) {
    p->components.push_back({"lost time (goodput)", step * (1 / x.s->goodput - 1),
                             Pct(x.s->goodput) + " of wall time in productive steps"});
    step /= x.s->goodput;
  }
  const JobSpec& spec = *x.spec;
  p->step_seconds = step;
  p->flops_per_step =
      MegatronFlopsPerStep(spec.model, spec.data.global_batch_size, spec.data.seq_length);
  p->tflops_per_gpu = TflopsPerDevice(p->flops_per_step, step, spec.parallelism.world_size);
  p->mfu_bf16 = p->tflops_per_gpu / x.c->peak_bf16_tflops;
  p->mfu_fp8 = x.c->peak_fp8_tflops > 0 ? p->tflops_per_gpu / x.c->peak_fp8_tflops : 0;
  const double step_tokens = D(spec.data.global_batch_size * spec.data.seq_length);
  p->tokens_per_second = step_tokens / step;
  p->tokens = o.token_budget > 0 ? o.token_budget : spec.TokensAfter(spec.training.steps);
  const double seconds = p->tokens / p->tokens_per_second;
  p->days = seconds / 86400;
  p->gpu_hours = seconds * D(spec.parallelism.world_size) / 3600;
  StatePeaks(x, o, p);
}

}  // namespace

const PlanComponent* Plan::Find(const std::string& name) const {
  for (const auto& c : components) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

PlanOptions PlacementOptions(const std::vector<std::string>& rank_racks, int64_t ep) {
  ep = std::max<int64_t>(ep, 1);
  std::set<std::string> racks;
  std::map<int64_t, std::set<std::string>> groups;
  for (size_t r = 0; r < rank_racks.size(); ++r) {
    racks.insert(rank_racks[r]);
    groups[static_cast<int64_t>(r) / ep].insert(rank_racks[r]);
  }
  PlanOptions o;
  o.racks = static_cast<int64_t>(racks.size());
  for (const auto& [g, in] : groups)
    o.ep_domains = std::max<int64_t>(o.ep_domains, static_cast<int64_t>(in.size()));
  return o;
}

std::string JobPrecision(const JobSpec& spec) {
  if (spec.resources.precision.has_value()) return *spec.resources.precision;
  return spec.resources.device == "cuda" ? "bf16" : "fp32";
}

namespace {

// The software's memory habits where the job leaves them to it (SoftwareProfile::moments_dtype,
// recompute); what changed, for the plan's header.
std::string ApplySoftwareHabits(const SoftwareProfile& software, JobSpec* spec) {
  std::string said;
  if (!software.moments_dtype.empty() && spec->optimizer.moments_dtype != software.moments_dtype) {
    spec->optimizer.moments_dtype = software.moments_dtype;
    said = "AdamW moments in " + software.moments_dtype;
  }
  if (spec->training.recompute.empty() && !software.recompute.empty()) {
    spec->training.recompute = software.recompute;
    std::string r;
    for (const auto& m : software.recompute) r += (r.empty() ? "" : "+") + m;
    said += (said.empty() ? "" : ", ") + std::string("recompute ") + r;
  }
  return said.empty() ? "" : said + " (" + software.name + "'s own; the job left them to it)";
}

// Tensor parallelism as Megatron-Core places it: TP dividing the heads and DP = world / PP, its
// groups of consecutive ranks inside one scale-up domain. Errors name --tensor-parallel.
Status CheckTensorParallel(const JobSpec& spec, const ClusterProfile& c, const Packing& pk,
                           int64_t tp) {
  const std::string flag = "--tensor-parallel " + std::to_string(tp) + ": ";
  if (tp < 1) return InvalidArgumentError(flag + "must be >= 1");
  if (tp == 1) return OkStatus();
  const int64_t heads = spec.model.num_heads, dp = spec.parallelism.data_parallel();
  if (heads % tp != 0) {
    return InvalidArgumentError(flag + "must divide the model's " + std::to_string(heads) +
                                " attention heads");
  }
  if (dp % tp != 0) {
    return InvalidArgumentError(flag + "must divide world_size / pipeline_parallel = " +
                                std::to_string(dp) + " (TP x DP ranks per pipeline stage)");
  }
  if (tp > c.domain_size || pk.per_domain % tp != 0) {
    return InvalidArgumentError(flag +
                                "a TP group stays in one scale-up domain (TP within a node, "
                                "as Megatron places it); " +
                                c.name + "'s domains hold " +
                                std::to_string(std::min(c.domain_size, pk.per_domain)) +
                                " of the job's ranks");
  }
  return OkStatus();
}

// "TP2 PP8 VPP4 EP32 DP16 MBS1" (DP: the dense data-parallel size, world / (PP x TP)), and what a
// TP layout asks of the software's stack.
void DescribeLayout(const JobSpec& spec, const SoftwareProfile& software, int64_t tp, Plan* p) {
  const ParallelismConfig& par = spec.parallelism;
  p->tensor_parallel = tp;
  p->layout = "TP" + std::to_string(tp) + " PP" + std::to_string(par.pipeline_parallel) + " VPP" +
              std::to_string(par.virtual_pipeline) + " EP" + std::to_string(par.expert_parallel) +
              " DP" + std::to_string(par.data_parallel() / tp) + " MBS" +
              std::to_string(spec.data.micro_batch_size);
  for (const auto& r : spec.training.recompute)
    p->recompute += (p->recompute.empty() ? "" : "+") + r;
  if (p->recompute.empty()) p->recompute = "none";
  if (tp == 1) return;
  const std::string tail =
      "; this engine runs none yet (the job spec has no tensor_parallel field)";
  p->runnable = software.tensor_parallel;
  p->tp_note = p->runnable ? "TP" + std::to_string(tp) + " as " + software.name + " runs it" + tail
                           : "needs tensor parallelism (TP" + std::to_string(tp) +
                                 "), which software " + software.name + " does not run" + tail;
}

}  // namespace

StatusOr<Plan> PlanJob(JobSpec spec, const ClusterProfile& cluster, const SoftwareProfile& software,
                       const PlanOptions& options) {
  const std::string habits = ApplySoftwareHabits(software, &spec);
  spec.resources.device = cluster.device;  // planned as it would run there
  if (cluster.device == "cpu") spec.resources.precision.reset();
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  const int64_t tp = options.tensor_parallel;
  MOE_ASSIGN_OR_RETURN(const Packing pk, Pack(spec, cluster, options));
  MOE_RETURN_IF_ERROR(CheckTensorParallel(spec, cluster, pk, tp));
  MOE_ASSIGN_OR_RETURN(const std::vector<StageLayout> layout, ResolvePipelineLayout(spec));
  Ctx x;
  MOE_RETURN_IF_ERROR(MakeCtx(spec, cluster, software, pk, tp, &x));
  Plan p;
  p.job = spec.name, p.cluster = cluster.name, p.software = software.name,
  p.precision = x.precision, p.habits = habits;
  DescribeLayout(spec, software, tp, &p);
  const ParallelismConfig& par = spec.parallelism;
  p.world_size = par.world_size, p.racks = pk.racks, p.ep_domains = pk.ep_domains;
  p.micro_batches = spec.micro_batches_per_rank() * tp;  // DP / TP replicas share the batch
  p.rows_per_expert = x.rows_per_expert;
  const double saved = software.fp8_saved_inputs && x.precision == "fp8" ? 1.03125 : 0;
  MOE_ASSIGN_OR_RETURN(p.memory, EstimateMemory(spec, static_cast<int64_t>(x.a), saved, tp));
  p.capacity_bytes = cluster.memory_gb * 1e9;
  MemoryVerdict(&p);
  std::vector<RankTime> ranks(static_cast<size_t>(par.pipeline_parallel));
  for (size_t v = 0; v < layout.size(); ++v) ranks[v % ranks.size()].Add(StageTime(x, layout[v]));
  AddPipeline(x, ranks, &p);
  AddTail(x, pk, p.memory.largest(), &p);
  Summarise(x, options, &p);
  if (options.mtbf_hours.has_value()) {
    MOE_ASSIGN_OR_RETURN(p.checkpoint, AdviseCheckpoint(p, spec, cluster, *options.mtbf_hours,
                                                        options.async_checkpoint));
  }
  return p;
}

}  // namespace moe
