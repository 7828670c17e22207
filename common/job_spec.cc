#include "common/job_spec.h"

#include <fstream>
#include <sstream>

#include "common/job_spec_schema.h"

namespace moe {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string Int(int64_t v) { return std::to_string(v); }

// The rules of the model that span fields; each field's own checks ran before (its table).
Status CheckModelShape(const ModelConfig& m, const std::string& path) {
  auto p = [&](const std::string& f) { return path + "." + f; };
  if (m.hidden_size % m.num_heads != 0) {
    return InvalidArgumentError(p("hidden_size") + ": " + Int(m.hidden_size) +
                                " is not divisible by num_heads = " + Int(m.num_heads));
  }
  if (m.attention.type == "mha" && m.head_dim() % 2 != 0) {
    return InvalidArgumentError(p("num_heads") + ": head dimension hidden_size/num_heads = " +
                                Int(m.head_dim()) + " must be even for RoPE");
  }
  if (m.first_k_dense > m.num_layers) {
    return InvalidArgumentError(p("first_k_dense") + ": " + Int(m.first_k_dense) +
                                " exceeds num_layers = " + Int(m.num_layers));
  }
  if (m.first_k_dense > 0) {
    MOE_RETURN_IF_ERROR(Positive()(m.dense_ffn_hidden, p("dense_ffn_hidden")));
  }
  if (m.attention.type == "mla") {
    const auto& a = m.attention;
    MOE_RETURN_IF_ERROR(Positive()(a.kv_lora_rank, p("attention.kv_lora_rank")));
    MOE_RETURN_IF_ERROR(Positive()(a.qk_head_dim, p("attention.qk_head_dim")));
    MOE_RETURN_IF_ERROR(Positive()(a.qk_rope_head_dim, p("attention.qk_rope_head_dim")));
    MOE_RETURN_IF_ERROR(Positive()(a.v_head_dim, p("attention.v_head_dim")));
  }
  return OkStatus();
}

// Routing: top_k experts out of the topk_groups best of num_groups groups.
Status CheckRouting(const MoeConfig& e, const std::string& mp) {
  if (e.top_k > e.num_experts) {
    return InvalidArgumentError(mp + ".top_k: " + Int(e.top_k) +
                                " exceeds num_experts = " + Int(e.num_experts));
  }
  if (e.num_experts % e.num_groups != 0) {
    return InvalidArgumentError(mp + ".num_groups: num_experts = " + Int(e.num_experts) +
                                " is not divisible by num_groups = " + Int(e.num_groups));
  }
  if (e.topk_groups > e.num_groups) {
    return InvalidArgumentError(mp + ".topk_groups: " + Int(e.topk_groups) +
                                " exceeds num_groups = " + Int(e.num_groups));
  }
  const int64_t reachable = e.topk_groups * (e.num_experts / e.num_groups);
  if (e.top_k > reachable) {
    return InvalidArgumentError(mp + ".top_k: " + Int(e.top_k) + " exceeds the " + Int(reachable) +
                                " experts in the topk_groups = " + Int(e.topk_groups) +
                                " groups a token may use");
  }
  return OkStatus();
}

Status CheckModelRules(const ModelConfig& m, const std::string& path) {
  MOE_RETURN_IF_ERROR(CheckModelShape(m, path));
  if (m.num_moe_layers() == 0) return OkStatus();  // the moe section is not used
  return CheckRouting(m.moe, path + ".moe");
}

Status CheckLayout(const JobSpec& s) {
  const auto& par = s.parallelism;
  if (par.world_size % par.expert_parallel != 0) {
    return InvalidArgumentError(
        "spec.parallelism.expert_parallel: world_size = " + Int(par.world_size) +
        " is not divisible by expert_parallel = " + Int(par.expert_parallel));
  }
  if (s.model.num_moe_layers() > 0 && s.model.moe.num_experts % par.expert_parallel != 0) {
    return InvalidArgumentError(
        "spec.parallelism.expert_parallel: num_experts = " + Int(s.model.moe.num_experts) +
        " is not divisible by expert_parallel = " + Int(par.expert_parallel));
  }
  const auto& d = s.data;
  if (d.source == "indexed" && d.path.empty()) {
    return InvalidArgumentError("spec.data.path: missing (prefix of <path>.bin and <path>.idx)");
  }
  if (d.global_batch_size % (d.micro_batch_size * par.world_size) != 0) {
    return InvalidArgumentError("spec.data.global_batch_size: " + Int(d.global_batch_size) +
                                " must be a multiple of micro_batch_size x world_size = " +
                                Int(d.micro_batch_size * par.world_size));
  }
  return OkStatus();
}

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
  if (doc.IsNull()) return InvalidArgumentError("the job document is empty");
  JobSpec spec;
  MOE_RETURN_IF_ERROR(SchemaOf<JobSpec>().Read(doc, "", &spec));
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
  MOE_RETURN_IF_ERROR(SchemaOf<ModelConfig>().Check(m, path));
  return CheckModelRules(m, path);
}

Status ValidateJobSpec(const JobSpec& s) {
  MOE_RETURN_IF_ERROR(SchemaOf<JobSpec>().Check(s, ""));
  MOE_RETURN_IF_ERROR(CheckModelRules(s.model, "spec.model"));
  MOE_RETURN_IF_ERROR(CheckLayout(s));
  if (s.optimizer.min_lr > s.optimizer.lr) {
    return InvalidArgumentError("spec.optimizer.min_lr: must be in [0, lr], got " +
                                Num(s.optimizer.min_lr));
  }
  return OkStatus();
}

Node ModelConfigToNode(const ModelConfig& m) { return SchemaOf<ModelConfig>().Write(m); }

Node JobSpecToNode(const JobSpec& s) { return SchemaOf<JobSpec>().Write(s); }

std::string ModelFingerprint(const JobSpec& s) {
  Node n = Node::Map();
  Node m = ModelConfigToNode(s.model);
  m.Set("preset", Node::Scalar("", true));  // the shape matters, not the name it came from
  n.Set("model", std::move(m));
  n.Set("world_size", Codec<int64_t>::Write(s.parallelism.world_size));
  n.Set("expert_parallel", Codec<int64_t>::Write(s.parallelism.expert_parallel));
  n.Set("seq_length", Codec<int64_t>::Write(s.data.seq_length));
  n.Set("global_batch_size", Codec<int64_t>::Write(s.data.global_batch_size));
  return ToJson(n);
}

}  // namespace moe
