#include "common/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/param_count.h"
#include "common/pipeline_layout.h"

namespace moe {
namespace {

double D(int64_t v) { return static_cast<double>(v); }

// The shapes one micro-batch's activations are counted at.
struct ActShape {
  const ModelConfig* m = nullptr;
  double tokens = 0;  // rows through the layer (batch x its sequence length)
  double sequences = 0;
  double a = 4;  // activation element bytes
  double g = 4;  // bytes of a saved linear-layer input (a, or fp8 where the stack quantizes them)
  double r = 4;  // routing and logits bytes (fp32; the master dtype)
  int64_t ep = 1;
  bool core_attn = false, mla_up_proj = false, mlp = false, moe_act = false, full = false;
};

// What one activation and the recompute flags cost, and the backward's largest transient.
struct Act {
  double kept = 0;
  double transient = 0;
  double staging = 0;  // all-to-all (communication)
};

double Norm(const ActShape& s, double width) {
  return s.tokens * width * s.a + s.tokens * 4;
}  // input + rstd

double Attention(const ActShape& s, double* largest) {
  const ModelConfig& m = *s.m;
  const double t = s.tokens, h = D(m.hidden_size), heads = D(m.num_heads), a = s.a;
  const double lse = t * heads * 4;  // one fp32 log-sum-exp per (token, head)
  if (!m.is_mla()) {
    const double hd = heads * D(m.head_dim());
    *largest = std::max(*largest, 3 * t * hd * a);  // dqkv
    return t * h * a + 3 * t * hd * a + (s.core_attn ? 0 : t * hd * a + lse);
  }
  const AttentionConfig& c = m.attention;
  const double dqk = D(c.qk_head_dim()), dv = D(c.v_head_dim), rq = D(c.q_lora_rank),
               rkv = D(c.kv_lora_rank);
  double bytes = t * h * s.g;  // the q/kv down-projections' input
  if (c.q_lora_rank > 0) bytes += Norm(s, rq) + t * rq * s.g;
  bytes += Norm(s, rkv) + t * rkv * s.g + t * D(c.qk_rope_head_dim) * a;
  if (!s.mla_up_proj) bytes += t * heads * (2 * dqk + dv) * a;
  if (!s.core_attn) bytes += t * heads * dv * a + lse;
  *largest = std::max(*largest, t * heads * (2 * dqk + dv) * a);  // dq, dk, dv
  return bytes;
}

double Swiglu(const ActShape& s, double rows, double f, bool recompute) {
  return recompute ? 0 : rows * 3 * f * s.a;  // gate|up and the activation
}

Act Moe(const ActShape& s, double* largest) {
  const MoeConfig& e = s.m->moe;
  const double t = s.tokens, h = D(s.m->hidden_size), k = D(e.top_k), f = D(e.ffn_hidden), a = s.a;
  const double rows = t * k;  // routed rows this rank computes, on average
  Act out;
  out.kept =
      t * h * a + t * D(e.num_experts) * s.r + t * k * (4 + s.r + 4) + (s.a != s.r ? t * k * a : 0);
  if (s.ep > 1) out.kept += 2 * rows * 4;  // the route's row maps
  out.kept += rows * h * s.g + rows * 2 * f * a + (s.moe_act ? 0 : rows * f * s.g) +
              rows * h * a;  // x_local, gate_up, act (the GEMMs' inputs: g), yp
  const double fs = f * D(e.num_shared_experts);
  out.kept += e.num_shared_experts > 0 ? Swiglu(s, t, fs, false) : 0;
  out.staging = s.ep > 1 ? rows * h * a : 0;
  *largest = std::max(*largest, rows * 2 * f * a + rows * h * a);  // d gate_up, d x_local
  return out;
}

// One transformer block (MoE or dense) at `s`.
Act Block(const ActShape& s, bool moe) {
  const double t = s.tokens, h = D(s.m->hidden_size), a = s.a;
  double largest = 0;
  Act out;
  out.kept = 2 * Norm(s, h) + Attention(s, &largest);
  if (moe) {
    const Act e = Moe(s, &largest);
    out.kept += e.kept;
    out.staging = e.staging;
  } else {
    const double f = D(s.m->dense_ffn_hidden);
    out.kept += t * h * s.g + Swiglu(s, t, f, s.mlp);
    largest = std::max(largest, t * 2 * f * a);
  }
  // The backward's working set: the largest gradient of an intermediate, its input's, and the
  // stream.
  out.transient = largest + 3 * t * h * a;
  if (s.full) {  // only the block's input is kept; the backward recomputes everything else first
    out.transient += out.kept;
    out.kept = t * h * a;
  }
  return out;
}

// The loss at `s`: the final norm's input and the gradient on its output kept (the head's backward
// runs in the forward, a chunk of rows at a time); transient, the norm's output with one chunk's
// logits (the master dtype) and their gradient (the activations' dtype, over the logits when the
// same), or the norm's backward.
Act Loss(const ActShape& s) {
  const double t = s.tokens, h = D(s.m->hidden_size), v = D(s.m->vocab_size);
  const double c =
      D(LossChunkRows(static_cast<int64_t>(t), s.m->vocab_size, static_cast<int64_t>(s.r)));
  const double chunk = c * v * s.r + (s.a != s.r ? c * v * s.a : 0) + t * h * s.a;
  return {Norm(s, h) + t * h * s.a, std::max(chunk, 2 * t * h * s.a), 0};
}

Act Mtp(const ActShape& s) {
  const double t = s.tokens, h = D(s.m->hidden_size);
  Act out = Block(s, s.m->MtpIsMoe());
  const Act loss = Loss(s);
  out.kept += 2 * Norm(s, h) + t * 2 * h * s.a + loss.kept;
  out.transient = std::max(out.transient, loss.transient);
  return out;
}

Act Scaled(Act a, double f) {
  a.kept *= f, a.transient *= f, a.staging *= f;
  return a;
}

void Accumulate(Act* total, const Act& part) {
  total->kept += part.kept;
  total->transient = std::max(total->transient, part.transient);
  total->staging = std::max(total->staging, part.staging);
}

// One micro-batch through one virtual stage.
Act StageActivations(const JobSpec& spec, const StageLayout& st, ActShape s) {
  const ModelConfig& m = spec.model;
  Act out;
  for (int64_t l = st.first_layer; l < st.first_layer + st.num_layers; ++l)
    Accumulate(&out, Block(s, m.IsMoeLayer(l)));
  if (st.loss) Accumulate(&out, Loss(s));
  const double seq = s.tokens / std::max(s.sequences, 1.0);
  for (int64_t d = 1; d <= st.mtp && m.MtpTrains(); ++d) {
    ActShape sd = s;
    sd.tokens = s.sequences * (seq - D(d));
    Accumulate(&out, Mtp(sd));
  }
  return out;
}

// Deterministic training's gradient staging where the activations peak (GradSink): the weight
// gradient being formed, counted as an fp32 scratch (the head's on the loss stage, in the forward
// where the head's backward runs: head_loss.h, its product per chunk on a GPU in the activations'
// dtype, kernels::GemmAccumulate; else about a block's widest weight; the embedding's comes last,
// when the activations are gone) and the f64 chunk its conversion goes through (at most 2^20
// values).
double GradStaging(const JobSpec& spec, const std::vector<StageLayout>& layout, int64_t r) {
  const ModelConfig& m = spec.model;
  if (!spec.training.Deterministic(spec.resources.device != "cuda")) return 0;
  const int64_t pp = spec.parallelism.pipeline_parallel;
  double largest = D(m.hidden_size) * D(std::max(m.dense_ffn_hidden, m.hidden_size)) * 2;
  for (int64_t v = r; v < static_cast<int64_t>(layout.size()); v += pp) {
    const StageLayout& st = layout[static_cast<size_t>(v)];
    if (st.loss || st.mtp > 0) largest = std::max(largest, D(m.vocab_size) * D(m.hidden_size));
  }
  return 4 * largest + 8 * std::min(largest, D(int64_t{1} << 20));
}

struct Params {
  double dense = 0, experts = 0;
};

Params StageParams(const ModelConfig& m, const StageLayout& st, bool holds_embedding, int64_t ep) {
  Params p;
  const double h = D(m.hidden_size), v = D(m.vocab_size);
  if (st.embedding) p.dense += v * h;
  for (int64_t l = st.first_layer; l < st.first_layer + st.num_layers; ++l) {
    const bool moe = m.IsMoeLayer(l);
    p.dense += BlockParams(m, moe) - (moe ? BlockExpertParams(m) : 0);
    if (moe) p.experts += BlockExpertParams(m) / D(ep);
  }
  if (st.loss) p.dense += h + v * h;
  for (int64_t d = 0; d < st.mtp; ++d) {
    p.dense += 3 * h + 2 * h * h + BlockParams(m, m.MtpIsMoe()) -
               (m.MtpIsMoe() ? BlockExpertParams(m) : 0);
    if (m.MtpIsMoe()) p.experts += BlockExpertParams(m) / D(ep);
  }
  if (st.mtp > 0 && !holds_embedding) p.dense += v * h;  // the embedding's copy MTP reads
  return p;
}

// Chunk-micro-batches in flight on pipeline rank r at the schedule's fullest (warm-up forwards +
// 1).
std::vector<int64_t> InFlightChunks(int64_t pp, int64_t vpp, int64_t micro_batches, int64_t r) {
  const int64_t total = micro_batches * vpp;
  const int64_t warmup =
      vpp > 1 ? std::min((pp - r - 1) * 2 + (vpp - 1) * pp, total) : std::min(pp - r - 1, total);
  const int64_t n = std::min(warmup + 1, total);
  std::vector<int64_t> chunks;
  for (int64_t k = 0; k < n; ++k) chunks.push_back((k % (pp * vpp)) / pp);
  return chunks;
}

ActShape ShapeOf(const JobSpec& spec, int64_t compute_bytes) {
  ActShape s;
  s.m = &spec.model;
  s.sequences = D(spec.data.micro_batch_size);
  s.tokens = s.sequences * D(spec.data.seq_length);
  s.a = D(compute_bytes);
  s.g = s.a;
  s.ep = spec.parallelism.expert_parallel;
  for (const std::string& r : spec.training.recompute) {
    s.core_attn |= r == "core_attn";
    s.mla_up_proj |= r == "mla_up_proj";
    s.mlp |= r == "mlp";
    s.moe_act |= r == "moe_act";
    s.full |= r == "full";
  }
  return s;
}

// `p.dense` is this rank's TP share; its data-parallel group is DP / TP ranks.
void StateBytes(const JobSpec& spec, const Params& p, double a, int64_t tp, StageMemory* out) {
  const ParallelismConfig& par = spec.parallelism;
  const bool zero = spec.optimizer.Distributed(par.data_parallel());
  const double moments = spec.optimizer.moments_dtype == "bf16" ? 2 : 4;
  const bool deterministic = spec.training.Deterministic(spec.resources.device != "cuda");
  auto add = [&](double n, double group) {
    const double shard = zero ? n / group : n;
    out->bytes[0] += a == 4 ? 4 * n : a * n + 4 * (zero ? shard : n);
    out->bytes[1] += (deterministic ? 12 : 4) * n;  // + the f64 accumulator
    out->bytes[2] += 2 * moments * shard;
  };
  add(p.dense, D(par.data_parallel()) / D(tp));
  add(p.experts, D(par.expert_data_parallel()));
}

}  // namespace

const char* MemoryKindName(MemoryKind k) {
  static const char* const kNames[] = {"weights", "gradients", "optimizer", "activations",
                                       "communication"};
  return k < MemoryKind::kCount ? kNames[static_cast<size_t>(k)] : "other";
}

double StageMemory::peak() const {
  double t = 0;
  for (double b : bytes) t += b;
  return t;
}

const StageMemory& MemoryPlan::largest() const {
  return *std::max_element(
      stages.begin(), stages.end(),
      [](const StageMemory& x, const StageMemory& y) { return x.peak() < y.peak(); });
}

int64_t LossChunkRows(int64_t rows, int64_t vocab, int64_t logits_bytes) {
  const int64_t row_bytes = std::max<int64_t>(1, vocab) * std::max<int64_t>(1, logits_bytes);
  int64_t fit = kLossChunkBytes / row_bytes;
  if (fit >= 128) fit -= fit % 128;  // whole tiles of the GEMMs' rows
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(1, rows));
}

StatusOr<MemoryPlan> EstimateMemory(const JobSpec& spec, int64_t compute_dtype_bytes,
                                    double gemm_input_bytes, int64_t tensor_parallel) {
  MOE_ASSIGN_OR_RETURN(const std::vector<StageLayout> layout, ResolvePipelineLayout(spec));
  const ParallelismConfig& par = spec.parallelism;
  const int64_t pp = par.pipeline_parallel, vpp = par.virtual_pipeline;
  const int64_t tp = std::max<int64_t>(tensor_parallel, 1);
  const double split = 1 / D(tp);  // a rank's share of the dense parameters and the activations
  MemoryPlan plan;
  plan.compute_bytes = compute_dtype_bytes;
  plan.distributed_optimizer = spec.optimizer.Distributed(par.data_parallel());
  ActShape shape = ShapeOf(spec, compute_dtype_bytes);
  if (gemm_input_bytes > 0) shape.g = gemm_input_bytes;
  for (int64_t r = 0; r < pp; ++r) {
    StageMemory st;
    st.pp_rank = static_cast<int>(r);
    Params p;
    std::vector<Act> chunk_acts;
    for (int64_t v = r; v < static_cast<int64_t>(layout.size()); v += pp) {
      const Params c =
          StageParams(spec.model, layout[static_cast<size_t>(v)], r == 0, par.expert_parallel);
      p.dense += c.dense * split;
      p.experts += c.experts;
      chunk_acts.push_back(
          Scaled(StageActivations(spec, layout[static_cast<size_t>(v)], shape), split));
      st.layout +=
          (st.layout.empty() ? "" : " | ") + StageLayoutString(layout[static_cast<size_t>(v)]);
      st.activations_per_micro_batch += chunk_acts.back().kept;
    }
    st.params = p.dense + p.experts;
    st.expert_params = p.experts;
    StateBytes(spec, p, D(compute_dtype_bytes), tp, &st);
    double kept = 0, transient = 0, staging = 0;
    const std::vector<int64_t> flight =
        InFlightChunks(pp, vpp, spec.micro_batches_per_rank() * tp, r);
    for (int64_t c : flight) kept += chunk_acts[static_cast<size_t>(c)].kept;
    for (const Act& a : chunk_acts) {
      transient = std::max(transient, a.transient);
      staging = std::max(staging, a.staging);
    }
    st.in_flight = static_cast<int64_t>(flight.size());
    st.bytes[3] = kept + transient + GradStaging(spec, layout, r) * split;
    st.bytes[4] = staging;
    plan.stages.push_back(st);
  }
  return plan;
}

namespace {

std::string Gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), bytes >= 1e9 ? "%.1f GB" : "%.1f MB",
                bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6);
  return buf;
}

// What would bring the largest stage under `capacity`, from what dominates it.
std::string WhyNot(const JobSpec& spec, const MemoryPlan& plan, double capacity) {
  const StageMemory& s = plan.largest();
  const ParallelismConfig& par = spec.parallelism;
  std::ostringstream os;
  os << "does not fit: pipeline rank " << s.pp_rank << " needs " << Gb(s.peak()) << " of "
     << Gb(capacity) << " (";
  for (size_t k = 0; k < kNumMemoryKinds; ++k) {
    os << (k ? ", " : "") << MemoryKindName(static_cast<MemoryKind>(k)) << " " << Gb(s.bytes[k]);
  }
  os << ")\n";
  const double state = s.bytes[0] + s.bytes[1] + s.bytes[2];
  if (!plan.distributed_optimizer && par.data_parallel() > 1) {
    os << "  - the AdamW state is replicated on every data-parallel rank: optimizer.distributed: "
          "true shards it (and the "
          "fp32 master weights) over DP "
       << par.data_parallel() << "\n";
  }
  if (state > capacity / 2 && par.pipeline_parallel == 1) {
    os << "  - the weights, gradients and optimizer state of all " << spec.model.num_layers
       << " layers sit on every rank: pipeline_parallel > 1 splits the layers over stages\n";
  }
  if (s.expert_params > 0.5 * s.params) {
    os << "  - routed experts are " << static_cast<int>(100 * s.expert_params / s.params)
       << "% of this rank's parameters: a larger expert_parallel (now " << par.expert_parallel
       << ") spreads them\n";
  }
  if (s.bytes[3] > capacity / 3) {
    os << "  - activations of " << s.in_flight
       << " micro-batch(es) in flight: training.recompute (mlp, mla_up_proj, "
          "core_attn, moe_act, full) or a smaller micro_batch_size\n";
  }
  return os.str();
}

}  // namespace

std::string MemoryReport(const JobSpec& spec, const MemoryPlan& plan, double capacity_bytes) {
  const ParallelismConfig& par = spec.parallelism;
  std::ostringstream os;
  const StageMemory& big = plan.largest();
  os << "memory per rank (estimate): peak " << Gb(big.peak()) << " on pipeline rank " << big.pp_rank
     << "; layout W=" << par.world_size << " (PP " << par.pipeline_parallel << " x DP "
     << par.data_parallel() << ", EP " << par.expert_parallel << ", VPP " << par.virtual_pipeline
     << "), micro batch " << spec.data.micro_batch_size << " x " << spec.data.seq_length << ", "
     << spec.micro_batches_per_rank() << " micro-batches per step, "
     << (plan.compute_bytes == 2 ? "bf16" : "fp32") << " activations, optimizer "
     << (plan.distributed_optimizer ? "distributed (ZeRO-1)" : "replicated") << ", moments "
     << spec.optimizer.moments_dtype << "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-4s %9s %10s %10s %10s %12s %10s %10s  %s\n", "pp",
                "params", "weights", "gradients", "optimizer", "activations", "comm", "total",
                "stages (in flight)");
  os << line;
  for (const StageMemory& s : plan.stages) {
    std::snprintf(line, sizeof(line), "  %-4d %9s %10s %10s %10s %12s %10s %10s  %s (%lld)\n",
                  s.pp_rank, HumanCount(s.params).c_str(), Gb(s.bytes[0]).c_str(),
                  Gb(s.bytes[1]).c_str(), Gb(s.bytes[2]).c_str(), Gb(s.bytes[3]).c_str(),
                  Gb(s.bytes[4]).c_str(), Gb(s.peak()).c_str(), s.layout.c_str(),
                  static_cast<long long>(s.in_flight));
    os << line;
  }
  if (capacity_bytes > 0) {
    if (big.peak() <= capacity_bytes) {
      os << "fits in " << Gb(capacity_bytes) << " per device (" << Gb(capacity_bytes - big.peak())
         << " left on the fullest rank for the allocator's cache, CUDA and NCCL workspaces)\n";
    } else {
      os << WhyNot(spec, plan, capacity_bytes);
    }
  }
  return os.str();
}

}  // namespace moe
