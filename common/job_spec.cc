#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace moe {
namespace {

std::string Join(std::string_view a, std::string_view b) {
  return a.empty() ? std::string(b) : std::string(a) + "." + std::string(b);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Reads the fields of one mapping, remembering which keys it consumed so that anything left over is
// reported as an unknown field, with a suggestion when a known one is close.
class MapReader {
 public:
  MapReader(const Node* node, std::string path, Status* status) : node_(node), path_(std::move(path)), status_(status) {
    if (node_ != nullptr && !node_->IsNull() && !node_->IsMap() && status_->ok()) {
      *status_ = InvalidArgumentError(Where() + ": expected a mapping, got " + std::string(node_->KindName()));
      node_ = nullptr;
    }
    if (node_ != nullptr && node_->IsNull()) node_ = nullptr;
  }

  const Node* Get(const std::string& key) {
    known_.insert(key);
    return node_ == nullptr ? nullptr : node_->Find(key);
  }
  bool Has(const std::string& key) { return Get(key) != nullptr; }

  void Int(const std::string& key, int64_t* out) {
    const Node* n = Get(key);
    if (n == nullptr || n->IsNull() || !status_->ok()) return;
    auto v = n->AsInt(Join(path_, key));
    if (!v.ok()) { *status_ = v.status(); return; }
    *out = *v;
  }
  void Uint(const std::string& key, uint64_t* out) {
    int64_t v = static_cast<int64_t>(*out);
    Int(key, &v);
    if (v < 0 && status_->ok()) *status_ = InvalidArgumentError(Join(path_, key) + ": must be >= 0, got " + std::to_string(v));
    *out = static_cast<uint64_t>(v);
  }
  void Double(const std::string& key, double* out) {
    const Node* n = Get(key);
    if (n == nullptr || n->IsNull() || !status_->ok()) return;
    auto v = n->AsDouble(Join(path_, key));
    if (!v.ok()) { *status_ = v.status(); return; }
    *out = *v;
  }
  void String(const std::string& key, std::string* out) {
    const Node* n = Get(key);
    if (n == nullptr || n->IsNull() || !status_->ok()) return;
    auto v = n->AsString(Join(path_, key));
    if (!v.ok()) { *status_ = v.status(); return; }
    *out = *v;
  }
  std::string Path(const std::string& key) const { return Join(path_, key); }

  // Reports the first key that no reader asked for.
  void Finish() {
    if (node_ == nullptr || !status_->ok()) return;
    for (const auto& [k, v] : node_->items()) {
      if (known_.count(k)) continue;
      std::string msg = Join(path_, k) + ": unknown field";
      std::string best;
      size_t best_d = 3;
      for (const auto& cand : known_) {
        size_t d = EditDistance(k, cand);
        if (d < best_d) { best_d = d; best = cand; }
      }
      if (!best.empty()) msg += " (did you mean '" + best + "'?)";
      else {
        msg += " (known: ";
        bool first = true;
        for (const auto& cand : known_) { msg += (first ? "" : ", ") + cand; first = false; }
        msg += ")";
      }
      *status_ = InvalidArgumentError(msg);
      return;
    }
  }

 private:
  std::string Where() const { return path_.empty() ? "document" : path_; }
  const Node* node_;
  std::string path_;
  Status* status_;
  std::set<std::string> known_;
};

void ReadAttention(const Node* n, const std::string& path, AttentionConfig* a, Status* st) {
  MapReader r(n, path, st);
  r.String("type", &a->type);
  r.Int("q_lora_rank", &a->q_lora_rank);
  r.Int("kv_lora_rank", &a->kv_lora_rank);
  r.Int("qk_head_dim", &a->qk_head_dim);
  r.Int("qk_rope_head_dim", &a->qk_rope_head_dim);
  r.Int("v_head_dim", &a->v_head_dim);
  r.Finish();
}

void ReadMoe(const Node* n, const std::string& path, MoeConfig* m, Status* st) {
  MapReader r(n, path, st);
  r.Int("num_experts", &m->num_experts);
  r.Int("top_k", &m->top_k);
  r.Int("num_shared_experts", &m->num_shared_experts);
  r.Int("ffn_hidden", &m->ffn_hidden);
  r.Int("num_groups", &m->num_groups);
  r.Int("topk_groups", &m->topk_groups);
  r.String("score_function", &m->score_function);
  r.Double("route_scale", &m->route_scale);
  r.Double("bias_update_rate", &m->bias_update_rate);
  r.Double("seq_aux_loss_coeff", &m->seq_aux_loss_coeff);
  r.Finish();
}

void ReadModel(const Node* n, const std::string& path, ModelConfig* m, Status* st) {
  MapReader r(n, path, st);
  std::string preset;
  r.String("preset", &preset);
  if (!st->ok()) return;
  if (!preset.empty()) {
    auto p = ModelPreset(preset);
    if (!p.ok()) { *st = p.status().WithPrefix(r.Path("preset")); return; }
    *m = *p;
  }
  r.Int("vocab_size", &m->vocab_size);
  r.Int("hidden_size", &m->hidden_size);
  r.Int("num_layers", &m->num_layers);
  r.Int("num_heads", &m->num_heads);
  r.Int("first_k_dense", &m->first_k_dense);
  r.Int("dense_ffn_hidden", &m->dense_ffn_hidden);
  r.Int("mtp_depth", &m->mtp_depth);
  r.Double("rope_theta", &m->rope_theta);
  r.Double("norm_eps", &m->norm_eps);
  r.Double("init_std", &m->init_std);
  ReadAttention(r.Get("attention"), r.Path("attention"), &m->attention, st);
  ReadMoe(r.Get("moe"), r.Path("moe"), &m->moe, st);
  r.Finish();
}

Status Positive(int64_t v, const std::string& path) {
  if (v <= 0) return InvalidArgumentError(path + ": must be > 0, got " + std::to_string(v));
  return OkStatus();
}
Status NonNegative(int64_t v, const std::string& path) {
  if (v < 0) return InvalidArgumentError(path + ": must be >= 0, got " + std::to_string(v));
  return OkStatus();
}
std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return false;
  }
  return std::isalnum(static_cast<unsigned char>(s.front())) && std::isalnum(static_cast<unsigned char>(s.back()));
}

Node IntNode(int64_t v) { return Node::Scalar(std::to_string(v)); }
Node DoubleNode(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  return Node::Scalar(s);
}
Node StrNode(const std::string& s) { return Node::Scalar(s, true); }

}  // namespace

std::vector<std::string> ModelPresetNames() { return {"tiny", "small", "deepseek-v3-671b"}; }

StatusOr<ModelConfig> ModelPreset(const std::string& name) {
  ModelConfig m;
  m.preset = name;
  if (name == "tiny") {
    // Trains in minutes on two cores; every MoE feature on (groups, shared expert, bias, aux loss).
    m.vocab_size = 2048;
    m.hidden_size = 128;
    m.num_layers = 4;
    m.num_heads = 4;
    m.first_k_dense = 1;
    m.dense_ffn_hidden = 384;
    m.moe = MoeConfig{.num_experts = 8, .top_k = 2, .num_shared_experts = 1, .ffn_hidden = 128,
                      .num_groups = 4, .topk_groups = 2, .score_function = "sigmoid", .route_scale = 1.0,
                      .bias_update_rate = 1e-3, .seq_aux_loss_coeff = 1e-4};
    return m;
  }
  if (name == "small") {
    // For benchmarks: large enough that the GEMMs dominate, small enough for a CPU step in seconds.
    m.vocab_size = 8192;
    m.hidden_size = 1024;
    m.num_layers = 4;
    m.num_heads = 16;
    m.first_k_dense = 1;
    m.dense_ffn_hidden = 2816;
    m.moe = MoeConfig{.num_experts = 16, .top_k = 4, .num_shared_experts = 1, .ffn_hidden = 512,
                      .num_groups = 4, .topk_groups = 2, .score_function = "sigmoid", .route_scale = 2.5,
                      .bias_update_rate = 1e-3, .seq_aux_loss_coeff = 1e-4};
    return m;
  }
  if (name == "deepseek-v3-671b") {
    // deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json (../shared/reference/).
    m.vocab_size = 129280;
    m.hidden_size = 7168;
    m.num_layers = 61;
    m.num_heads = 128;
    m.first_k_dense = 3;
    m.dense_ffn_hidden = 18432;
    m.mtp_depth = 1;
    m.attention = AttentionConfig{.type = "mla", .q_lora_rank = 1536, .kv_lora_rank = 512,
                                  .qk_head_dim = 128, .qk_rope_head_dim = 64, .v_head_dim = 128};
    m.moe = MoeConfig{.num_experts = 256, .top_k = 8, .num_shared_experts = 1, .ffn_hidden = 2048,
                      .num_groups = 8, .topk_groups = 4, .score_function = "sigmoid", .route_scale = 2.5,
                      .bias_update_rate = 1e-3, .seq_aux_loss_coeff = 1e-4};
    return m;
  }
  std::string known;
  for (const auto& n : ModelPresetNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown preset '" + name + "' (known: " + known + ")");
}

StatusOr<JobSpec> ParseJobSpec(const Node& doc) {
  JobSpec spec;
  Status st;
  MapReader top(&doc, "", &st);
  if (doc.IsNull()) return InvalidArgumentError("the job document is empty");
  top.String("apiVersion", &spec.api_version);
  top.String("kind", &spec.kind);
  {
    MapReader meta(top.Get("metadata"), "metadata", &st);
    meta.String("name", &spec.name);
    meta.Int("priority", &spec.priority);
    meta.Finish();
  }
  MapReader s(top.Get("spec"), "spec", &st);
  if (st.ok() && !top.Has("spec")) return InvalidArgumentError("spec: missing (the job needs a spec section)");
  if (st.ok() && !s.Has("model")) return InvalidArgumentError("spec.model: missing");
  ReadModel(s.Get("model"), "spec.model", &spec.model, &st);
  {
    MapReader r(s.Get("parallelism"), "spec.parallelism", &st);
    r.Int("world_size", &spec.parallelism.world_size);
    r.Int("expert_parallel", &spec.parallelism.expert_parallel);
    r.Double("timeout_seconds", &spec.parallelism.timeout_seconds);
    r.Finish();
  }
  {
    MapReader r(s.Get("placement"), "spec.placement", &st);
    r.String("expert_group_within", &spec.placement.expert_group_within);
    r.Finish();
  }
  {
    MapReader r(s.Get("data"), "spec.data", &st);
    r.String("path", &spec.data.path);
    r.String("source", &spec.data.source);
    r.Int("seq_length", &spec.data.seq_length);
    r.Int("micro_batch_size", &spec.data.micro_batch_size);
    r.Int("global_batch_size", &spec.data.global_batch_size);
    r.Finish();
  }
  {
    MapReader r(s.Get("optimizer"), "spec.optimizer", &st);
    auto& o = spec.optimizer;
    r.Double("lr", &o.lr);
    r.Double("min_lr", &o.min_lr);
    r.Int("warmup_steps", &o.warmup_steps);
    r.Int("decay_steps", &o.decay_steps);
    r.Double("weight_decay", &o.weight_decay);
    r.Double("grad_clip", &o.grad_clip);
    r.Double("beta1", &o.beta1);
    r.Double("beta2", &o.beta2);
    r.Double("eps", &o.eps);
    r.Finish();
  }
  {
    MapReader r(s.Get("training"), "spec.training", &st);
    r.Int("steps", &spec.training.steps);
    r.Uint("seed", &spec.training.seed);
    r.Int("log_interval", &spec.training.log_interval);
    r.Finish();
  }
  {
    MapReader r(s.Get("checkpoint"), "spec.checkpoint", &st);
    r.String("dir", &spec.checkpoint.dir);
    r.Int("interval_steps", &spec.checkpoint.interval_steps);
    r.Int("keep_last", &spec.checkpoint.keep_last);
    r.Finish();
  }
  {
    MapReader r(s.Get("resources"), "spec.resources", &st);
    r.String("device", &spec.resources.device);
    r.Finish();
  }
  s.Int("max_restarts", &spec.max_restarts);
  s.Finish();
  top.Finish();
  MOE_RETURN_IF_ERROR(st);
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

StatusOr<JobSpec> ParseJobSpecText(std::string_view text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text));
  return ParseJobSpec(doc);
}

StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read job file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = ParseJobSpecText(ss.str());
  if (!spec.ok()) return spec.status().WithPrefix(path);
  return spec;
}

Status ValidateModel(const ModelConfig& m, std::string_view path_view) {
  const std::string path(path_view);
  auto p = [&](const std::string& f) { return path + "." + f; };
  MOE_RETURN_IF_ERROR(Positive(m.vocab_size, p("vocab_size")));
  if (m.vocab_size < 2) return InvalidArgumentError(p("vocab_size") + ": must be >= 2");
  MOE_RETURN_IF_ERROR(Positive(m.hidden_size, p("hidden_size")));
  MOE_RETURN_IF_ERROR(Positive(m.num_layers, p("num_layers")));
  MOE_RETURN_IF_ERROR(Positive(m.num_heads, p("num_heads")));
  if (m.hidden_size % m.num_heads != 0) {
    return InvalidArgumentError(p("hidden_size") + ": " + std::to_string(m.hidden_size) + " is not divisible by num_heads = " + std::to_string(m.num_heads));
  }
  if (m.attention.type == "mha" && m.head_dim() % 2 != 0) {
    return InvalidArgumentError(p("num_heads") + ": head dimension hidden_size/num_heads = " + std::to_string(m.head_dim()) + " must be even for RoPE");
  }
  MOE_RETURN_IF_ERROR(NonNegative(m.first_k_dense, p("first_k_dense")));
  if (m.first_k_dense > m.num_layers) {
    return InvalidArgumentError(p("first_k_dense") + ": " + std::to_string(m.first_k_dense) + " exceeds num_layers = " + std::to_string(m.num_layers));
  }
  if (m.first_k_dense > 0) MOE_RETURN_IF_ERROR(Positive(m.dense_ffn_hidden, p("dense_ffn_hidden")));
  MOE_RETURN_IF_ERROR(NonNegative(m.mtp_depth, p("mtp_depth")));
  if (!(m.rope_theta > 0)) return InvalidArgumentError(p("rope_theta") + ": must be > 0");
  if (!(m.norm_eps > 0)) return InvalidArgumentError(p("norm_eps") + ": must be > 0");
  if (!(m.init_std > 0)) return InvalidArgumentError(p("init_std") + ": must be > 0");
  const auto& a = m.attention;
  if (a.type != "mha" && a.type != "mla") return InvalidArgumentError(p("attention.type") + ": must be mha or mla, got '" + a.type + "'");
  if (a.type == "mla") {
    MOE_RETURN_IF_ERROR(NonNegative(a.q_lora_rank, p("attention.q_lora_rank")));
    MOE_RETURN_IF_ERROR(Positive(a.kv_lora_rank, p("attention.kv_lora_rank")));
    MOE_RETURN_IF_ERROR(Positive(a.qk_head_dim, p("attention.qk_head_dim")));
    MOE_RETURN_IF_ERROR(Positive(a.qk_rope_head_dim, p("attention.qk_rope_head_dim")));
    MOE_RETURN_IF_ERROR(Positive(a.v_head_dim, p("attention.v_head_dim")));
  }
  if (m.num_moe_layers() == 0) return OkStatus();
  const auto& e = m.moe;
  const std::string mp = p("moe");
  MOE_RETURN_IF_ERROR(Positive(e.num_experts, mp + ".num_experts"));
  MOE_RETURN_IF_ERROR(Positive(e.top_k, mp + ".top_k"));
  if (e.top_k > e.num_experts) {
    return InvalidArgumentError(mp + ".top_k: " + std::to_string(e.top_k) + " exceeds num_experts = " + std::to_string(e.num_experts));
  }
  MOE_RETURN_IF_ERROR(NonNegative(e.num_shared_experts, mp + ".num_shared_experts"));
  MOE_RETURN_IF_ERROR(Positive(e.ffn_hidden, mp + ".ffn_hidden"));
  MOE_RETURN_IF_ERROR(Positive(e.num_groups, mp + ".num_groups"));
  MOE_RETURN_IF_ERROR(Positive(e.topk_groups, mp + ".topk_groups"));
  if (e.num_experts % e.num_groups != 0) {
    return InvalidArgumentError(mp + ".num_groups: num_experts = " + std::to_string(e.num_experts) + " is not divisible by num_groups = " + std::to_string(e.num_groups));
  }
  if (e.topk_groups > e.num_groups) {
    return InvalidArgumentError(mp + ".topk_groups: " + std::to_string(e.topk_groups) + " exceeds num_groups = " + std::to_string(e.num_groups));
  }
  const int64_t reachable = e.topk_groups * (e.num_experts / e.num_groups);
  if (e.top_k > reachable) {
    return InvalidArgumentError(mp + ".top_k: " + std::to_string(e.top_k) + " exceeds the " + std::to_string(reachable) +
                                " experts in the topk_groups = " + std::to_string(e.topk_groups) + " groups a token may use");
  }
  if (e.score_function != "sigmoid" && e.score_function != "softmax") {
    return InvalidArgumentError(mp + ".score_function: must be sigmoid or softmax, got '" + e.score_function + "'");
  }
  if (!(e.route_scale > 0)) return InvalidArgumentError(mp + ".route_scale: must be > 0, got " + Num(e.route_scale));
  if (e.bias_update_rate < 0) return InvalidArgumentError(mp + ".bias_update_rate: must be >= 0, got " + Num(e.bias_update_rate));
  if (e.seq_aux_loss_coeff < 0) return InvalidArgumentError(mp + ".seq_aux_loss_coeff: must be >= 0, got " + Num(e.seq_aux_loss_coeff));
  return OkStatus();
}

Status ValidateJobSpec(const JobSpec& s) {
  if (s.api_version != "moe/v1") return InvalidArgumentError("apiVersion: must be moe/v1, got '" + s.api_version + "'");
  if (s.kind != "TrainingJob") return InvalidArgumentError("kind: must be TrainingJob, got '" + s.kind + "'");
  if (s.name.empty()) return InvalidArgumentError("metadata.name: missing");
  if (!ValidName(s.name)) {
    return InvalidArgumentError("metadata.name: '" + s.name + "' must be 1-63 characters of a-z, 0-9, '-', '.', '_', starting and ending alphanumeric");
  }
  MOE_RETURN_IF_ERROR(ValidateModel(s.model, "spec.model"));
  const auto& par = s.parallelism;
  MOE_RETURN_IF_ERROR(Positive(par.world_size, "spec.parallelism.world_size"));
  MOE_RETURN_IF_ERROR(Positive(par.expert_parallel, "spec.parallelism.expert_parallel"));
  if (par.world_size % par.expert_parallel != 0) {
    return InvalidArgumentError("spec.parallelism.expert_parallel: world_size = " + std::to_string(par.world_size) + " is not divisible by expert_parallel = " + std::to_string(par.expert_parallel));
  }
  if (s.model.num_moe_layers() > 0 && s.model.moe.num_experts % par.expert_parallel != 0) {
    return InvalidArgumentError("spec.parallelism.expert_parallel: num_experts = " + std::to_string(s.model.moe.num_experts) + " is not divisible by expert_parallel = " + std::to_string(par.expert_parallel));
  }
  if (!(par.timeout_seconds > 0)) return InvalidArgumentError("spec.parallelism.timeout_seconds: must be > 0");
  const auto& pl = s.placement.expert_group_within;
  if (pl != "rack" && pl != "node" && pl != "any") {
    return InvalidArgumentError("spec.placement.expert_group_within: must be rack, node or any, got '" + pl + "'");
  }
  const auto& d = s.data;
  if (d.source != "indexed" && d.source != "synthetic") {
    return InvalidArgumentError("spec.data.source: must be indexed or synthetic, got '" + d.source + "'");
  }
  if (d.source == "indexed" && d.path.empty()) return InvalidArgumentError("spec.data.path: missing (prefix of <path>.bin and <path>.idx)");
  if (d.seq_length < 2) return InvalidArgumentError("spec.data.seq_length: must be >= 2, got " + std::to_string(d.seq_length));
  MOE_RETURN_IF_ERROR(Positive(d.micro_batch_size, "spec.data.micro_batch_size"));
  MOE_RETURN_IF_ERROR(Positive(d.global_batch_size, "spec.data.global_batch_size"));
  if (d.global_batch_size % (d.micro_batch_size * par.world_size) != 0) {
    return InvalidArgumentError("spec.data.global_batch_size: " + std::to_string(d.global_batch_size) +
                                " must be a multiple of micro_batch_size x world_size = " + std::to_string(d.micro_batch_size * par.world_size));
  }
  const auto& o = s.optimizer;
  if (!(o.lr > 0)) return InvalidArgumentError("spec.optimizer.lr: must be > 0, got " + Num(o.lr));
  if (o.min_lr < 0 || o.min_lr > o.lr) return InvalidArgumentError("spec.optimizer.min_lr: must be in [0, lr], got " + Num(o.min_lr));
  MOE_RETURN_IF_ERROR(NonNegative(o.warmup_steps, "spec.optimizer.warmup_steps"));
  MOE_RETURN_IF_ERROR(NonNegative(o.decay_steps, "spec.optimizer.decay_steps"));
  if (o.weight_decay < 0) return InvalidArgumentError("spec.optimizer.weight_decay: must be >= 0, got " + Num(o.weight_decay));
  if (o.grad_clip < 0) return InvalidArgumentError("spec.optimizer.grad_clip: must be >= 0 (0 turns clipping off), got " + Num(o.grad_clip));
  if (o.beta1 < 0 || o.beta1 >= 1) return InvalidArgumentError("spec.optimizer.beta1: must be in [0, 1), got " + Num(o.beta1));
  if (o.beta2 < 0 || o.beta2 >= 1) return InvalidArgumentError("spec.optimizer.beta2: must be in [0, 1), got " + Num(o.beta2));
  if (!(o.eps > 0)) return InvalidArgumentError("spec.optimizer.eps: must be > 0, got " + Num(o.eps));
  MOE_RETURN_IF_ERROR(Positive(s.training.steps, "spec.training.steps"));
  MOE_RETURN_IF_ERROR(Positive(s.training.log_interval, "spec.training.log_interval"));
  MOE_RETURN_IF_ERROR(NonNegative(s.checkpoint.interval_steps, "spec.checkpoint.interval_steps"));
  MOE_RETURN_IF_ERROR(NonNegative(s.checkpoint.keep_last, "spec.checkpoint.keep_last"));
  const auto& dev = s.resources.device;
  if (dev != "cpu" && dev != "cuda") return InvalidArgumentError("spec.resources.device: must be cpu or cuda, got '" + dev + "'");
  MOE_RETURN_IF_ERROR(NonNegative(s.max_restarts, "spec.max_restarts"));
  return OkStatus();
}

Node ModelConfigToNode(const ModelConfig& m) {
  Node n = Node::Map();
  if (!m.preset.empty()) n.Set("preset", StrNode(m.preset));
  n.Set("vocab_size", IntNode(m.vocab_size));
  n.Set("hidden_size", IntNode(m.hidden_size));
  n.Set("num_layers", IntNode(m.num_layers));
  n.Set("num_heads", IntNode(m.num_heads));
  n.Set("first_k_dense", IntNode(m.first_k_dense));
  n.Set("dense_ffn_hidden", IntNode(m.dense_ffn_hidden));
  n.Set("mtp_depth", IntNode(m.mtp_depth));
  n.Set("rope_theta", DoubleNode(m.rope_theta));
  n.Set("norm_eps", DoubleNode(m.norm_eps));
  n.Set("init_std", DoubleNode(m.init_std));
  Node a = Node::Map();
  a.Set("type", StrNode(m.attention.type));
  a.Set("q_lora_rank", IntNode(m.attention.q_lora_rank));
  a.Set("kv_lora_rank", IntNode(m.attention.kv_lora_rank));
  a.Set("qk_head_dim", IntNode(m.attention.qk_head_dim));
  a.Set("qk_rope_head_dim", IntNode(m.attention.qk_rope_head_dim));
  a.Set("v_head_dim", IntNode(m.attention.v_head_dim));
  n.Set("attention", std::move(a));
  Node e = Node::Map();
  e.Set("num_experts", IntNode(m.moe.num_experts));
  e.Set("top_k", IntNode(m.moe.top_k));
  e.Set("num_shared_experts", IntNode(m.moe.num_shared_experts));
  e.Set("ffn_hidden", IntNode(m.moe.ffn_hidden));
  e.Set("num_groups", IntNode(m.moe.num_groups));
  e.Set("topk_groups", IntNode(m.moe.topk_groups));
  e.Set("score_function", StrNode(m.moe.score_function));
  e.Set("route_scale", DoubleNode(m.moe.route_scale));
  e.Set("bias_update_rate", DoubleNode(m.moe.bias_update_rate));
  e.Set("seq_aux_loss_coeff", DoubleNode(m.moe.seq_aux_loss_coeff));
  n.Set("moe", std::move(e));
  return n;
}

Node JobSpecToNode(const JobSpec& s) {
  Node doc = Node::Map();
  doc.Set("apiVersion", StrNode(s.api_version));
  doc.Set("kind", StrNode(s.kind));
  Node meta = Node::Map();
  meta.Set("name", StrNode(s.name));
  meta.Set("priority", IntNode(s.priority));
  doc.Set("metadata", std::move(meta));
  Node spec = Node::Map();
  spec.Set("model", ModelConfigToNode(s.model));
  Node par = Node::Map();
  par.Set("world_size", IntNode(s.parallelism.world_size));
  par.Set("expert_parallel", IntNode(s.parallelism.expert_parallel));
  par.Set("timeout_seconds", DoubleNode(s.parallelism.timeout_seconds));
  spec.Set("parallelism", std::move(par));
  Node pl = Node::Map();
  pl.Set("expert_group_within", StrNode(s.placement.expert_group_within));
  spec.Set("placement", std::move(pl));
  Node d = Node::Map();
  d.Set("path", StrNode(s.data.path));
  d.Set("source", StrNode(s.data.source));
  d.Set("seq_length", IntNode(s.data.seq_length));
  d.Set("micro_batch_size", IntNode(s.data.micro_batch_size));
  d.Set("global_batch_size", IntNode(s.data.global_batch_size));
  spec.Set("data", std::move(d));
  Node o = Node::Map();
  o.Set("lr", DoubleNode(s.optimizer.lr));
  o.Set("min_lr", DoubleNode(s.optimizer.min_lr));
  o.Set("warmup_steps", IntNode(s.optimizer.warmup_steps));
  o.Set("decay_steps", IntNode(s.optimizer.decay_steps));
  o.Set("weight_decay", DoubleNode(s.optimizer.weight_decay));
  o.Set("grad_clip", DoubleNode(s.optimizer.grad_clip));
  o.Set("beta1", DoubleNode(s.optimizer.beta1));
  o.Set("beta2", DoubleNode(s.optimizer.beta2));
  o.Set("eps", DoubleNode(s.optimizer.eps));
  spec.Set("optimizer", std::move(o));
  Node t = Node::Map();
  t.Set("steps", IntNode(s.training.steps));
  t.Set("seed", Node::Scalar(std::to_string(s.training.seed)));
  t.Set("log_interval", IntNode(s.training.log_interval));
  spec.Set("training", std::move(t));
  Node c = Node::Map();
  c.Set("dir", StrNode(s.checkpoint.dir));
  c.Set("interval_steps", IntNode(s.checkpoint.interval_steps));
  c.Set("keep_last", IntNode(s.checkpoint.keep_last));
  spec.Set("checkpoint", std::move(c));
  Node r = Node::Map();
  r.Set("device", StrNode(s.resources.device));
  spec.Set("resources", std::move(r));
  spec.Set("max_restarts", IntNode(s.max_restarts));
  doc.Set("spec", std::move(spec));
  return doc;
}

std::string ModelFingerprint(const JobSpec& s) {
  Node n = Node::Map();
  Node m = ModelConfigToNode(s.model);
  m.Set("preset", StrNode(""));  // the shape matters, not the name it came from
  n.Set("model", std::move(m));
  n.Set("world_size", IntNode(s.parallelism.world_size));
  n.Set("expert_parallel", IntNode(s.parallelism.expert_parallel));
  n.Set("seq_length", IntNode(s.data.seq_length));
  n.Set("global_batch_size", IntNode(s.data.global_batch_size));
  return ToJson(n);
}

}  // namespace moe
