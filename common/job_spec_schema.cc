#include "common/job_spec_schema.h"

#include <cctype>

#include "common/presets.h"

namespace moe {
namespace {

bool IsLowerAlnum(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
}

// metadata.name: it becomes part of paths, log files and Kubernetes labels.
// Priorities are compared as they are; the bound keeps them far from overflow wherever they are
// used.
Status ValidPriority(int64_t v, const std::string& path) {
  if (v >= -1000000000 && v <= 1000000000) return OkStatus();
  return InvalidArgumentError(path + ": must be in -1000000000 .. 1000000000, got " +
                              std::to_string(v));
}

// Kubernetes' label syntax: a key is [prefix/]name (name: 1-63 of A-Z a-z 0-9 - _ ., alphanumeric
// at both ends; prefix: a DNS subdomain of at most 253); a value is empty or a name. At most 64
// labels.
bool IsLabelName(std::string_view s) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  for (char c : s) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

Status ValidLabels(const std::map<std::string, std::string>& labels, const std::string& path) {
  if (labels.size() > 64)
    return InvalidArgumentError(path + ": at most 64 labels, got " + std::to_string(labels.size()));
  for (const auto& [key, value] : labels) {
    const size_t slash = key.find('/');
    const std::string_view prefix =
        slash == std::string::npos ? "" : std::string_view(key).substr(0, slash);
    const std::string_view name = slash == std::string::npos
                                      ? std::string_view(key)
                                      : std::string_view(key).substr(slash + 1);
    const bool prefix_ok = slash == std::string::npos ||
                           (!prefix.empty() && prefix.size() <= 253 && IsLabelName(prefix));
    if (!prefix_ok || !IsLabelName(name)) {
      return InvalidArgumentError(path + ": key '" + key +
                                  "' must be [prefix/]name, the name 1-63 characters of a-z, A-Z, "
                                  "0-9, '-', '_', '.', starting and ending alphanumeric");
    }
    if (!value.empty() && !IsLabelName(value)) {
      return InvalidArgumentError(path + "." + key + ": '" + value +
                                  "' must be empty or 1-63 characters of a-z, A-Z, 0-9, "
                                  "'-', '_', '.', starting and ending alphanumeric");
    }
  }
  return OkStatus();
}

// `preset: tiny` fills in every model field; the fields after it in the table override.
Status ApplyPreset(ModelConfig* m) {
  if (m->preset.empty()) return OkStatus();
  MOE_ASSIGN_OR_RETURN(*m, ModelPreset(m->preset));
  return OkStatus();
}

}  // namespace

Status ValidName(const std::string& s, const std::string& path) {
  bool ok = !s.empty() && s.size() <= 63 && IsLowerAlnum(s.front()) && IsLowerAlnum(s.back());
  for (char c : s) ok = ok && (IsLowerAlnum(c) || c == '-' || c == '.' || c == '_');
  if (ok) return OkStatus();
  return InvalidArgumentError(
      path + ": '" + s +
      "' must be 1-63 characters of a-z, 0-9, '-', '.', '_', starting and ending alphanumeric");
}

// The tables read best one field a line.
// clang-format off
template <>
const Schema<ScheduleSegment>& SchemaOf<ScheduleSegment>() {
  using G = ScheduleSegment;
  // The order of segments and what each shape needs: ValidateSchedule.
  static const auto* schema = new Schema<G>("ScheduleSegment", {
      Field("until_tokens", &G::until_tokens, Positive()),
      Field("shape", &G::shape, OneOf({"constant", "linear", "cosine"})),
      Field("value", &G::value, NonNegative()),
      Field("from", &G::from, NonNegative()),
      Field("to", &G::to, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<AttentionConfig>& SchemaOf<AttentionConfig>() {
  using A = AttentionConfig;
  // The ranks matter for mla only (ValidateModel requires them there).
  static const auto* schema = new Schema<A>("AttentionConfig", {
      Field("type", &A::type, OneOf({"mha", "mla"})),
      Field("q_lora_rank", &A::q_lora_rank, NonNegative()),
      Field("kv_lora_rank", &A::kv_lora_rank, NonNegative()),
      Field("qk_nope_head_dim", &A::qk_nope_head_dim, NonNegative()),
      Field("qk_rope_head_dim", &A::qk_rope_head_dim, NonNegative()),
      Field("v_head_dim", &A::v_head_dim, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<RopeScalingConfig>& SchemaOf<RopeScalingConfig>() {
  using R = RopeScalingConfig;
  static const auto* schema = new Schema<R>("RopeScalingConfig", {
      Field("type", &R::type, OneOf({"none", "yarn"})),
      Field("factor", &R::factor, AtLeast(1.0)),
      Field("original_max_position_embeddings", &R::original_max_position_embeddings, Positive()),
      Field("beta_fast", &R::beta_fast, Positive()),
      Field("beta_slow", &R::beta_slow, Positive()),
      Field("mscale", &R::mscale, Positive()),
      Field("mscale_all_dim", &R::mscale_all_dim, Positive()),
  });
  return *schema;
}

template <>
const Schema<BatchRampConfig>& SchemaOf<BatchRampConfig>() {
  using B = BatchRampConfig;
  // How the ramp must fit the global and micro batches: ValidateJobSpec.
  static const auto* schema = new Schema<B>("BatchRampConfig", {
      Field("start", &B::start, NonNegative()),
      Field("increment", &B::increment, NonNegative()),
      Field("tokens", &B::tokens, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<MoeConfig>& SchemaOf<MoeConfig>() {
  using E = MoeConfig;
  static const auto* schema = new Schema<E>("MoeConfig", {
      Field("num_experts", &E::num_experts, Positive()),
      Field("top_k", &E::top_k, Positive()),
      Field("num_shared_experts", &E::num_shared_experts, NonNegative()),
      Field("ffn_hidden", &E::ffn_hidden, Positive()),
      Field("num_groups", &E::num_groups, Positive()),
      Field("topk_groups", &E::topk_groups, Positive()),
      Field("score_function", &E::score_function, OneOf({"sigmoid", "softmax"})),
      Field("route_scale", &E::route_scale, Positive()),
      Field("expert_bias", &E::expert_bias),
      Field("bias_update_rate", &E::bias_update_rate, NonNegative()),
      Field("bias_update_schedule", &E::bias_update_schedule),
      Field("seq_aux_loss_coeff", &E::seq_aux_loss_coeff, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<ModelConfig>& SchemaOf<ModelConfig>() {
  using M = ModelConfig;
  static const auto* schema = new Schema<M>("ModelConfig", {
      // First, so that the fields after it override the preset's.
      Field("preset", &M::preset).AfterRead(ApplyPreset),
      Field("vocab_size", &M::vocab_size, AtLeast(2)),
      Field("hidden_size", &M::hidden_size, Positive()),
      Field("num_layers", &M::num_layers, Positive()),
      Field("num_heads", &M::num_heads, Positive()),
      Field("first_k_dense", &M::first_k_dense, NonNegative()),
      Field("dense_ffn_hidden", &M::dense_ffn_hidden, NonNegative()),
      Field("mtp_depth", &M::mtp_depth, NonNegative()),
      Field("mtp_loss_weight", &M::mtp_loss_weight, NonNegative()),
      Field("mtp_loss_weight_schedule", &M::mtp_loss_weight_schedule),
      Field("rope_theta", &M::rope_theta, Positive()),
      Field("rope_scaling", &M::rope_scaling),
      Field("norm_eps", &M::norm_eps, Positive()),
      Field("init_std", &M::init_std, Positive()),
      Field("attention", &M::attention),
      Field("moe", &M::moe),
  });
  return *schema;
}

template <>
const Schema<ParallelismConfig>& SchemaOf<ParallelismConfig>() {
  using P = ParallelismConfig;
  static const auto* schema = new Schema<P>("ParallelismConfig", {
      Field("world_size", &P::world_size, Positive()),
      Field("expert_parallel", &P::expert_parallel, Positive()),
      Field("pipeline_parallel", &P::pipeline_parallel, Positive()),
      Field("virtual_pipeline", &P::virtual_pipeline, Positive()),
      Field("pipeline_layout", &P::pipeline_layout),  // checked against the model: ResolvePipelineLayout
      Field("timeout_seconds", &P::timeout_seconds, Positive()),
      Field("grad_bucket_mb", &P::grad_bucket_mb, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<PlacementConfig>& SchemaOf<PlacementConfig>() {
  using P = PlacementConfig;
  static const auto* schema = new Schema<P>("PlacementConfig", {
      Field("expert_group_within", &P::expert_group_within, OneOf({"rack", "node", "any"})),
  });
  return *schema;
}

template <>
const Schema<DataConfig>& SchemaOf<DataConfig>() {
  using D = DataConfig;
  static const auto* schema = new Schema<D>("DataConfig", {
      Field("path", &D::path),  // required for indexed data (ValidateJobSpec)
      Field("source", &D::source, OneOf({"indexed", "synthetic"})),
      Field("seq_length", &D::seq_length, AtLeast(2)),
      Field("micro_batch_size", &D::micro_batch_size, Positive()),
      Field("global_batch_size", &D::global_batch_size, Positive()),
      Field("batch_ramp", &D::batch_ramp),
      Field("split", &D::split),  // ParseSplit (ValidateJobSpec)
  });
  return *schema;
}

template <>
const Schema<OptimizerConfig>& SchemaOf<OptimizerConfig>() {
  using O = OptimizerConfig;
  static const auto* schema = new Schema<O>("OptimizerConfig", {
      Field("lr", &O::lr, Positive()),
      Field("min_lr", &O::min_lr, NonNegative()),  // and <= lr (ValidateJobSpec)
      Field("warmup_steps", &O::warmup_steps, NonNegative()),
      Field("decay_steps", &O::decay_steps, NonNegative()),
      Field("weight_decay", &O::weight_decay, NonNegative()),
      Field("grad_clip", &O::grad_clip, NonNegative()),
      Field("beta1", &O::beta1, InRange(0, 1)),
      Field("beta2", &O::beta2, InRange(0, 1)),
      Field("eps", &O::eps, Positive()),
      Field("lr_schedule", &O::lr_schedule),
      Field("moments_dtype", &O::moments_dtype, OneOf({"fp32", "bf16"})),
      Field("distributed", &O::distributed),
  });
  return *schema;
}

template <>
const Schema<TrainingConfig>& SchemaOf<TrainingConfig>() {
  using T = TrainingConfig;
  static const auto* schema = new Schema<T>("TrainingConfig", {
      Field("steps", &T::steps, Positive()),
      Field("seed", &T::seed),
      Field("log_interval", &T::log_interval, Positive()),
      Field("recompute", &T::recompute, Each(OneOf({"core_attn", "mla_up_proj", "mlp", "moe_act", "full"}))),
      Field("attention", &T::attention, OneOf({"flash", "materialized"})),
      Field("eval_interval", &T::eval_interval, NonNegative()),
      Field("eval_batches", &T::eval_batches, Positive()),
      Field("deterministic", &T::deterministic),
  });
  return *schema;
}

template <>
const Schema<CheckpointConfig>& SchemaOf<CheckpointConfig>() {
  using C = CheckpointConfig;
  static const auto* schema = new Schema<C>("CheckpointConfig", {
      Field("dir", &C::dir),
      Field("interval_steps", &C::interval_steps, NonNegative()),
      Field("keep_last", &C::keep_last, NonNegative()),
      Field("async", &C::async),
  });
  return *schema;
}

template <>
const Schema<ResourcesConfig>& SchemaOf<ResourcesConfig>() {
  using R = ResourcesConfig;
  static const auto* schema = new Schema<R>("ResourcesConfig", {
      Field("device", &R::device, OneOf({"cpu", "cuda"})),
      Field("precision", &R::precision, OneOf({"fp32", "bf16", "fp8"})),
  });
  return *schema;
}

template <>
const Schema<ElasticConfig>& SchemaOf<ElasticConfig>() {
  using E = ElasticConfig;
  static const auto* schema = new Schema<E>("ElasticConfig", {
      Field("min_data_parallel", &E::min_data_parallel, NonNegative()),
  });
  return *schema;
}

template <>
const Schema<JobDependency>& SchemaOf<JobDependency>() {
  using D = JobDependency;
  static const auto* schema = new Schema<D>("JobDependency", {
      Field("job", &D::job, NotEmpty()),
      Field("condition", &D::condition, OneOf({"succeeded", "finished"})),
  });
  return *schema;
}

template <>
const Schema<JobSpec>& SchemaOf<JobSpec>() {
  using J = JobSpec;
  static const auto* schema = new Schema<J>("JobSpec", {
      Field("apiVersion", &J::api_version, OneOf({"moe/v1"})),
      Field("kind", &J::kind, OneOf({"TrainingJob"})),
      Section<J>("metadata", {
          Field("name", &J::name, NotEmpty(), ValidName),
          Field("priority", &J::priority, ValidPriority),
          Field("priority_class", &J::priority_class, [](const std::string& v, const std::string& path) {
            return v.empty() ? OkStatus() : ValidName(v, path);  // empty: no class
          }),
          Field("labels", &J::labels, ValidLabels),
          Field("queue", &J::queue, [](const std::string& v, const std::string& path) {
            return v.empty() ? OkStatus() : ValidName(v, path);  // empty: the default queue
          }),
          Field("depends_on", &J::depends_on, [](const std::vector<JobDependency>& v, const std::string& path) {
            return v.size() <= 64 ? OkStatus() : InvalidArgumentError(path + ": at most 64 dependencies, got " + std::to_string(v.size()));
          }),
      }),
      Section<J>("spec", {
          Field("model", &J::model),
          Field("parallelism", &J::parallelism),
          Field("placement", &J::placement),
          Field("data", &J::data),
          Field("optimizer", &J::optimizer),
          Field("training", &J::training),
          Field("checkpoint", &J::checkpoint),
          Field("resources", &J::resources),
          Field("max_restarts", &J::max_restarts, NonNegative()),
          Field("elastic", &J::elastic),
          Field("time_limit", &J::time_limit, NonNegative()),
      }).Required("the job needs a spec section"),
  });
  return *schema;
}
// clang-format on

}  // namespace moe
