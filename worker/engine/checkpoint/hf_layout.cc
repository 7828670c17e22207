#include "worker/engine/checkpoint/hf_layout.h"

#include <cmath>
#include <sstream>

namespace moe::checkpoint {
namespace {

std::string Value(const std::string& param) { return "param/" + param + "/value"; }

// Appends the HF tensors held by engine tensor `engine` ([global shape]), each a range of it.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(std::vector<HfTensor>* out) : out_(out) {}

  // The whole engine parameter is the HF tensor.
  void Whole(const std::string& hf, const std::string& param, const std::vector<int64_t>& shape) {
    out_->push_back({hf, shape, Value(param), shape, 0, false});
  }
  // A fused [2F, h] SwiGLU weight (at `base` within `engine_shape`): gate rows [0, F), up rows [F,
  // 2F).
  void GateUp(const std::string& hf_prefix, const std::string& param, int64_t f, int64_t h,
              const std::vector<int64_t>& engine_shape, int64_t base) {
    out_->push_back(
        {hf_prefix + ".gate_proj.weight", {f, h}, Value(param), engine_shape, base, false});
    out_->push_back(
        {hf_prefix + ".up_proj.weight", {f, h}, Value(param), engine_shape, base + f * h, false});
  }

 private:
  std::vector<HfTensor>* out_;
};

void AddAttention(LayoutBuilder& b, const ModelConfig& m, const std::string& hf,
                  const std::string& p) {
  const auto& a = m.attention;
  const int64_t h = m.hidden_size, n = m.num_heads;
  if (a.q_lora_rank > 0) {
    b.Whole(hf + ".self_attn.q_a_proj.weight", p + ".q_a_proj", {a.q_lora_rank, h});
    b.Whole(hf + ".self_attn.q_a_layernorm.weight", p + ".q_a_layernorm", {a.q_lora_rank});
    b.Whole(hf + ".self_attn.q_b_proj.weight", p + ".q_b_proj",
            {n * a.qk_head_dim(), a.q_lora_rank});
  } else {
    b.Whole(hf + ".self_attn.q_proj.weight", p + ".q_proj", {n * a.qk_head_dim(), h});
  }
  b.Whole(hf + ".self_attn.kv_a_proj_with_mqa.weight", p + ".kv_a_proj_with_mqa",
          {a.kv_lora_rank + a.qk_rope_head_dim, h});
  b.Whole(hf + ".self_attn.kv_a_layernorm.weight", p + ".kv_a_layernorm", {a.kv_lora_rank});
  b.Whole(hf + ".self_attn.kv_b_proj.weight", p + ".kv_b_proj",
          {n * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank});
  b.Whole(hf + ".self_attn.o_proj.weight", p + ".o_proj", {h, n * a.v_head_dim});
}

void AddMoe(LayoutBuilder& b, std::vector<HfTensor>* out, const ModelConfig& m,
            const std::string& hf, const std::string& p) {
  const int64_t h = m.hidden_size, f = m.moe.ffn_hidden, e = m.moe.num_experts;
  b.Whole(hf + ".mlp.gate.weight", p + ".router", {e, h});
  if (m.moe.has_bias())
    out->push_back({hf + ".mlp.gate.e_score_correction_bias", {e}, "bias/" + p, {e}, 0, false});
  for (int64_t j = 0; j < e; ++j) {
    const std::string ex = hf + ".mlp.experts." + std::to_string(j);
    b.GateUp(ex, p + ".experts.w13", f, h, {e, 2 * f, h}, j * 2 * f * h);
    out->push_back(
        {ex + ".down_proj.weight", {h, f}, Value(p + ".experts.w2"), {e, h, f}, j * h * f, false});
  }
  if (m.moe.num_shared_experts > 0) {
    const int64_t fs = f * m.moe.num_shared_experts;
    b.GateUp(hf + ".mlp.shared_experts", p + ".shared.w13", fs, h, {2 * fs, h}, 0);
    b.Whole(hf + ".mlp.shared_experts.down_proj.weight", p + ".shared.w2", {h, fs});
  }
}

// One transformer block: the engine's `p` (layers.L or mtp.k.block) as HF layer `hf`.
void AddBlock(LayoutBuilder& b, std::vector<HfTensor>* out, const ModelConfig& m,
              const std::string& hf, const std::string& p, bool moe) {
  const int64_t h = m.hidden_size;
  b.Whole(hf + ".input_layernorm.weight", p + ".attn_norm", {h});
  AddAttention(b, m, hf, p + ".attn");
  b.Whole(hf + ".post_attention_layernorm.weight", p + ".ffn_norm", {h});
  if (moe) {
    AddMoe(b, out, m, hf, p + ".moe");
    return;
  }
  const int64_t f = m.dense_ffn_hidden;
  b.GateUp(hf + ".mlp", p + ".ffn.w13", f, h, {2 * f, h}, 0);
  b.Whole(hf + ".mlp.down_proj.weight", p + ".ffn.w2", {h, f});
}

void AddMtp(LayoutBuilder& b, std::vector<HfTensor>* out, const ModelConfig& m, bool copies) {
  const int64_t h = m.hidden_size, v = m.vocab_size;
  for (int64_t k = 1; k <= m.mtp_depth; ++k) {
    const std::string hf = "model.layers." + std::to_string(m.num_layers + k - 1);
    const std::string p = "mtp." + std::to_string(k - 1);
    b.Whole(hf + ".enorm.weight", p + ".enorm", {h});
    b.Whole(hf + ".hnorm.weight", p + ".hnorm", {h});
    b.Whole(hf + ".eh_proj.weight", p + ".eh_proj", {h, 2 * h});
    AddBlock(b, out, m, hf, p + ".block", m.MtpIsMoe());
    b.Whole(hf + ".shared_head.norm.weight", p + ".final_norm", {h});
    if (copies) {
      out->push_back({hf + ".embed_tokens.weight", {v, h}, Value("embedding"), {v, h}, 0, true});
      out->push_back({hf + ".shared_head.head.weight", {v, h}, Value("head"), {v, h}, 0, true});
    }
  }
}

Node Int(int64_t v) { return Node::Scalar(std::to_string(v)); }
Node Num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return Node::Scalar(os.str());
}
Node Str(const std::string& s) { return Node::Scalar(s, true); }

}  // namespace

StatusOr<std::vector<HfTensor>> HfLayout(const ModelConfig& m, bool mtp_table_copies) {
  if (!m.is_mla()) {
    return InvalidArgumentError(
        "model.attention.type: the DeepseekV3 layout has multi-head latent attention (mla); this "
        "model has " +
        m.attention.type);
  }
  std::vector<HfTensor> out;
  LayoutBuilder b(&out);
  const int64_t h = m.hidden_size, v = m.vocab_size;
  b.Whole("model.embed_tokens.weight", "embedding", {v, h});
  for (int64_t l = 0; l < m.num_layers; ++l) {
    AddBlock(b, &out, m, "model.layers." + std::to_string(l), "layers." + std::to_string(l),
             m.IsMoeLayer(l));
  }
  b.Whole("model.norm.weight", "final_norm", {h});
  b.Whole("lm_head.weight", "head", {v, h});
  if (m.MtpTrains()) AddMtp(b, &out, m, mtp_table_copies);
  return out;
}

bool HfConfigInfo::yarn_applied(const ModelConfig& m) const {
  const int64_t len = rope_length > 0 ? rope_length : max_position_embeddings;
  return m.rope_scaling.type == "yarn" && len > m.rope_scaling.original_max_position_embeddings;
}

namespace {

// The routing method's name in DeepSeek's configs: noaux_tc (the selection bias, group-limited),
// group_limited_greedy (groups, no bias: DeepSeek-V2) or greedy (neither).
std::string TopkMethod(const MoeConfig& e) {
  if (e.has_bias()) return "noaux_tc";
  return e.num_groups > 1 && e.topk_groups < e.num_groups ? "group_limited_greedy" : "greedy";
}

void SetRouting(Node& c, const ModelConfig& m) {
  const auto& e = m.moe;
  c.Set("routed_scaling_factor", Num(e.route_scale));
  c.Set("scoring_func", Str(e.score_function));
  c.Set("topk_method", Str(TopkMethod(e)));
  // Sigmoid scores are normalised over the chosen experts, softmax scores are not
  // (kernels/router.h).
  c.Set("norm_topk_prob", Node::Scalar(e.score_function == "sigmoid" ? "true" : "false"));
  c.Set("moe_layer_freq", Int(1));
}

void SetRotary(Node& c, const ModelConfig& m, const HfConfigInfo& info) {
  c.Set("rope_theta", Num(m.rope_theta));
  c.Set("rope_interleave", Node::Scalar("true"));  // MLA rotates adjacent pairs, as released
  if (!info.yarn_applied(m)) {
    c.Set("rope_scaling", Node());
    return;
  }
  const auto& r = m.rope_scaling;
  Node y = Node::Map();
  y.Set("type", Str("yarn"));
  y.Set("factor", Num(r.factor));
  y.Set("original_max_position_embeddings", Int(r.original_max_position_embeddings));
  y.Set("beta_fast", Num(r.beta_fast));
  y.Set("beta_slow", Num(r.beta_slow));
  y.Set("mscale", Num(r.mscale));
  y.Set("mscale_all_dim", Num(r.mscale_all_dim));
  c.Set("rope_scaling", std::move(y));
}

}  // namespace

Node HfConfig(const ModelConfig& m, const HfConfigInfo& info) {
  const auto& a = m.attention;
  const auto& e = m.moe;
  Node c = Node::Map();
  Node arch = Node::List();
  arch.Append(Str("DeepseekV3ForCausalLM"));
  c.Set("architectures", std::move(arch));
  c.Set("model_type", Str("deepseek_v3"));
  for (const auto& [k, val] : std::vector<std::pair<std::string, int64_t>>{
           {"vocab_size", m.vocab_size},
           {"hidden_size", m.hidden_size},
           {"intermediate_size", m.dense_ffn_hidden},
           {"moe_intermediate_size", e.ffn_hidden},
           {"num_hidden_layers", m.num_layers},
           {"num_attention_heads", m.num_heads},
           {"num_key_value_heads", m.num_heads},
           {"n_routed_experts", e.num_experts},
           {"n_shared_experts", e.num_shared_experts},
           {"num_experts_per_tok", e.top_k},
           {"n_group", e.num_groups},
           {"topk_group", e.topk_groups},
           {"first_k_dense_replace", m.first_k_dense},
           {"kv_lora_rank", a.kv_lora_rank},
           {"qk_nope_head_dim", a.qk_nope_head_dim},
           {"qk_rope_head_dim", a.qk_rope_head_dim},
           {"v_head_dim", a.v_head_dim},
           {"max_position_embeddings", info.max_position_embeddings},
           {"num_nextn_predict_layers", m.MtpTrains() ? m.mtp_depth : 0}}) {
    c.Set(k, Int(val));
  }
  c.Set("q_lora_rank", a.q_lora_rank > 0 ? Int(a.q_lora_rank) : Node());
  SetRouting(c, m);
  SetRotary(c, m, info);
  c.Set("rms_norm_eps", Num(m.norm_eps));
  c.Set("initializer_range", Num(m.init_std));
  c.Set("tie_word_embeddings", Node::Scalar("false"));
  c.Set("attention_bias", Node::Scalar("false"));
  c.Set("hidden_act", Str("silu"));
  if (info.bos_token_id >= 0) c.Set("bos_token_id", Int(info.bos_token_id));
  if (info.eos_token_id >= 0) c.Set("eos_token_id", Int(info.eos_token_id));
  c.Set("torch_dtype", Str(info.torch_dtype));
  return c;
}

namespace {

std::string Shown(const Node* n) {
  if (n == nullptr) return "(missing)";
  if (n->IsNull()) return "null";
  if (n->IsMap() || n->IsList()) return ToJson(*n);
  return n->scalar();
}

// Key `key` may be missing or null, or must read as one of `allowed`.
Status Allowed(const Node& c, const std::string& key, const std::vector<std::string>& allowed,
               bool missing_ok, const std::string& why) {
  const Node* n = c.Find(key);
  if (n == nullptr || n->IsNull()) {
    if (missing_ok) return OkStatus();
  } else {
    for (const std::string& a : allowed) {
      if (n->scalar() == a) return OkStatus();
    }
  }
  return InvalidArgumentError("config.json: " + key + " is " + Shown(n) + ": " + why);
}

Status CheckRopeScaling(const Node& c) {
  const Node* y = c.Find("rope_scaling");
  if (y == nullptr || y->IsNull()) return OkStatus();
  if (!y->IsMap()) return InvalidArgumentError("config.json: rope_scaling is not an object");
  const Node* type = y->Find("type") != nullptr ? y->Find("type") : y->Find("rope_type");
  if (type == nullptr || type->scalar() != "yarn")
    return InvalidArgumentError("config.json: rope_scaling.type is " + Shown(type) +
                                ": only yarn is supported");
  for (const char* k : {"factor", "original_max_position_embeddings", "mscale", "mscale_all_dim"}) {
    if (y->Find(k) == nullptr)
      return InvalidArgumentError(std::string("config.json: rope_scaling.") + k +
                                  " is missing (YaRN needs it given)");
  }
  MOE_ASSIGN_OR_RETURN(const double ms, y->Find("mscale")->AsDouble("config.json: rope_scaling"));
  MOE_ASSIGN_OR_RETURN(const double all,
                       y->Find("mscale_all_dim")->AsDouble("config.json: rope_scaling"));
  if (ms != all) {
    return InvalidArgumentError(
        "config.json: rope_scaling.mscale is " + Shown(y->Find("mscale")) + " and mscale_all_dim " +
        Shown(y->Find("mscale_all_dim")) +
        ": unsupported (transformers multiplies cos and sin by their ratio; this engine scales "
        "the softmax by mscale_all_dim alone, which is the same only when they are equal)");
  }
  return OkStatus();
}

Status CheckTopkMethod(const Node& c) {
  MOE_RETURN_IF_ERROR(Allowed(c, "topk_method", {"noaux_tc", "greedy", "group_limited_greedy"},
                              true, "supported: noaux_tc, greedy, group_limited_greedy"));
  const Node* t = c.Find("topk_method");
  const Node* g = c.Find("n_group");
  const Node* k = c.Find("topk_group");
  const bool groups_limit = g != nullptr && !g->IsNull() && g->scalar() != "1" &&
                            (k == nullptr || k->IsNull() || k->scalar() != g->scalar());
  if (t != nullptr && !t->IsNull() && t->scalar() == "greedy" && groups_limit) {
    return InvalidArgumentError("config.json: topk_method is greedy (no group limit) but n_group " +
                                Shown(g) + " and topk_group " + Shown(k) +
                                " would limit the groups");
  }
  return OkStatus();
}

}  // namespace

Status CheckHfConventions(const Node& c) {
  if (!c.IsMap()) return InvalidArgumentError("config.json: not a JSON object");
  MOE_RETURN_IF_ERROR(Allowed(c, "model_type", {"deepseek_v3"}, false, "only deepseek_v3"));
  MOE_RETURN_IF_ERROR(Allowed(c, "hidden_act", {"silu"}, true, "only silu (SwiGLU)"));
  MOE_RETURN_IF_ERROR(
      Allowed(c, "tie_word_embeddings", {"false"}, true, "tied embeddings are not supported"));
  MOE_RETURN_IF_ERROR(
      Allowed(c, "attention_bias", {"false"}, true, "attention biases are not supported"));
  MOE_RETURN_IF_ERROR(Allowed(c, "moe_layer_freq", {"1"}, true,
                              "only 1 (every layer after first_k_dense_replace is MoE)"));
  MOE_RETURN_IF_ERROR(Allowed(c, "rope_interleave", {"true"}, true,
                              "only true (MLA's rotary dims in adjacent pairs, as released)"));
  MOE_RETURN_IF_ERROR(
      Allowed(c, "scoring_func", {"sigmoid", "softmax"}, true, "supported: sigmoid, softmax"));
  const Node* score = c.Find("scoring_func");
  const bool sigmoid = score == nullptr || score->IsNull() || score->scalar() == "sigmoid";
  MOE_RETURN_IF_ERROR(Allowed(c, "norm_topk_prob", {sigmoid ? "true" : "false"}, true,
                              sigmoid ? "with sigmoid scores the chosen experts' weights are "
                                        "normalised (true)"
                                      : "with softmax scores they are not (false)"));
  MOE_RETURN_IF_ERROR(CheckTopkMethod(c));
  MOE_RETURN_IF_ERROR(CheckRopeScaling(c));
  if (const Node* q = c.Find("quantization_config"); q != nullptr && !q->IsNull()) {
    return InvalidArgumentError("config.json: quantization_config is " + Shown(q) +
                                ": quantized weights are not supported (dequantize to bf16 first)");
  }
  return OkStatus();
}

Status CheckHfConfig(const Node& config, const ModelConfig& m) {
  const Node want = HfConfig(m, HfConfigInfo());
  const char* keys[] = {"vocab_size",          "hidden_size",
                        "intermediate_size",   "moe_intermediate_size",
                        "num_hidden_layers",   "num_attention_heads",
                        "n_routed_experts",    "n_shared_experts",
                        "num_experts_per_tok", "n_group",
                        "topk_group",          "first_k_dense_replace",
                        "q_lora_rank",         "kv_lora_rank",
                        "qk_nope_head_dim",    "qk_rope_head_dim",
                        "v_head_dim",          "scoring_func",
                        "topk_method"};
  for (const char* k : keys) {
    const Node* have = config.Find(k);
    const std::string a = have == nullptr ? "(missing)" : have->IsNull() ? "null" : have->scalar();
    const Node* w = want.Find(k);
    const std::string b = w->IsNull() ? "null" : w->scalar();
    const bool both_null = (a == "null" || a == "(missing)") && b == "null";
    if (a != b && !both_null) {
      return InvalidArgumentError("config.json: " + std::string(k) + " is " + a +
                                  ", this job's model has " + b);
    }
  }
  if (const Node* r = config.Find("routed_scaling_factor"); r != nullptr && !r->IsNull()) {
    MOE_ASSIGN_OR_RETURN(const double v, r->AsDouble("config.json: routed_scaling_factor"));
    if (v != m.moe.route_scale) {
      return InvalidArgumentError("config.json: routed_scaling_factor is " + r->scalar() +
                                  ", this job's model has " + Num(m.moe.route_scale).scalar());
    }
  }
  return OkStatus();
}

}  // namespace moe::checkpoint
