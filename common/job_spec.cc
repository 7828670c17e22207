#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/confined_dir.h"
#include "common/job_spec_schema.h"
#include "common/pipeline_layout.h"

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
  // MHA splits hidden_size into its heads; MLA's heads have their own sizes (attention.*_head_dim).
  if (m.attention.type == "mha" && m.hidden_size % m.num_heads != 0) {
    return InvalidArgumentError(p("hidden_size") + ": " + Int(m.hidden_size) +
                                " is not divisible by num_heads = " + Int(m.num_heads) +
                                " (multi-head attention's heads split hidden_size)");
  }
  // The engine scales the softmax by mscale_all_dim's mscale^2 alone; transformers also multiplies
  // cos and sin by mscale(mscale) / mscale(mscale_all_dim), which is 1 only when they are equal.
  if (m.rope_scaling.type == "yarn" && m.rope_scaling.mscale != m.rope_scaling.mscale_all_dim) {
    return InvalidArgumentError(
        p("rope_scaling.mscale") + ": " + Num(m.rope_scaling.mscale) +
        " differs from mscale_all_dim = " + Num(m.rope_scaling.mscale_all_dim) +
        ": unsupported (the engine applies mscale_all_dim alone, as "
        "DeepSeek-V3 does with both equal)");
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
  if (m.is_mla()) {
    const auto& a = m.attention;
    MOE_RETURN_IF_ERROR(Positive()(a.kv_lora_rank, p("attention.kv_lora_rank")));
    MOE_RETURN_IF_ERROR(Positive()(a.qk_nope_head_dim, p("attention.qk_nope_head_dim")));
    MOE_RETURN_IF_ERROR(Positive()(a.qk_rope_head_dim, p("attention.qk_rope_head_dim")));
    MOE_RETURN_IF_ERROR(Positive()(a.v_head_dim, p("attention.v_head_dim")));
    if (a.qk_rope_head_dim % 2 != 0) {
      return InvalidArgumentError(p("attention.qk_rope_head_dim") + ": " + Int(a.qk_rope_head_dim) +
                                  " must be even (RoPE rotates pairs)");
    }
  }
  MOE_RETURN_IF_ERROR(ValidateSchedule(m.mtp_loss_weight_schedule, p("mtp_loss_weight_schedule")));
  return ValidateSchedule(m.moe.bias_update_schedule, p("moe.bias_update_schedule"));
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

Status CheckBatchRamp(const DataConfig& d, int64_t unit);

// W = PP x DP, EP inside DP; interleaving needs a pipeline and whole rounds of micro-batches.
// Bounds no real job comes near, which keep the sizes derived from a spec (ranks as 32-bit
// numbers, a stage per pipeline chunk, the micro-batches of a step) far from int64's end and their
// allocations small: a spec past them is refused, not built (a virtual_pipeline of 10^9 made a
// vector of 10^9 stages in the controller).
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;       // devices
constexpr int64_t kMaxPipelineStages = int64_t{1} << 16;  // pipeline_parallel x virtual_pipeline
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 40;     // sequences

Status CheckParallelism(const JobSpec& s) {
  const auto& par = s.parallelism;
  const std::string p = "spec.parallelism.";
  if (par.world_size > kMaxWorldSize) {
    return InvalidArgumentError(p + "world_size: " + Int(par.world_size) + " exceeds " +
                                Int(kMaxWorldSize) + " devices (no cluster is that large)");
  }
  int64_t stages = 0;
  if (__builtin_mul_overflow(par.pipeline_parallel, par.virtual_pipeline, &stages) ||
      stages > kMaxPipelineStages) {
    return InvalidArgumentError(p + "virtual_pipeline: pipeline_parallel x virtual_pipeline = " +
                                Int(par.pipeline_parallel) + " x " + Int(par.virtual_pipeline) +
                                " exceeds " + Int(kMaxPipelineStages) + " pipeline stages");
  }
  if (par.world_size % par.pipeline_parallel != 0) {
    return InvalidArgumentError(
        p + "pipeline_parallel: world_size = " + Int(par.world_size) +
        " is not divisible by pipeline_parallel = " + Int(par.pipeline_parallel));
  }
  if (par.data_parallel() % par.expert_parallel != 0) {
    return InvalidArgumentError(
        p + "expert_parallel: the data-parallel size world_size / pipeline_parallel = " +
        Int(par.data_parallel()) +
        " is not divisible by expert_parallel = " + Int(par.expert_parallel));
  }
  if (s.model.num_moe_layers() > 0 && s.model.moe.num_experts % par.expert_parallel != 0) {
    return InvalidArgumentError(
        p + "expert_parallel: num_experts = " + Int(s.model.moe.num_experts) +
        " is not divisible by expert_parallel = " + Int(par.expert_parallel));
  }
  if (par.virtual_pipeline > 1 && par.pipeline_parallel < 2) {
    return InvalidArgumentError(p + "virtual_pipeline: " + Int(par.virtual_pipeline) +
                                " model chunks per rank need pipeline_parallel > 1");
  }
  return ResolvePipelineLayout(s).status();
}

Status CheckLayout(const JobSpec& s) {
  MOE_RETURN_IF_ERROR(CheckParallelism(s));
  const auto& par = s.parallelism;
  const auto& d = s.data;
  if (d.source == "indexed" && d.path.empty()) {
    return InvalidArgumentError("spec.data.path: missing (prefix of <path>.bin and <path>.idx)");
  }
  if (d.global_batch_size > kMaxGlobalBatch) {
    return InvalidArgumentError("spec.data.global_batch_size: " + Int(d.global_batch_size) +
                                " exceeds " + Int(kMaxGlobalBatch) +
                                " sequences (no batch is that large)");
  }
  // Past int64 the product is no size a job can have (and the multiplication would be undefined).
  int64_t unit = 0;
  if (__builtin_mul_overflow(d.micro_batch_size, par.data_parallel(), &unit)) {
    return InvalidArgumentError("spec.data.micro_batch_size: " + Int(d.micro_batch_size) +
                                " x data-parallel size " + Int(par.data_parallel()) +
                                " is past int64: no batch is that large");
  }
  if (d.global_batch_size % unit != 0) {
    return InvalidArgumentError("spec.data.global_batch_size: " + Int(d.global_batch_size) +
                                " must be a multiple of micro_batch_size x data-parallel size "
                                "(world_size / pipeline_parallel) = " +
                                Int(unit));
  }
  // Interleaving runs the micro-batches in rounds of pipeline_parallel (Megatron's requirement).
  // Within the bounds above unit x pipeline_parallel stays below 2^56; checked all the same (past
  // int64 it could divide no global_batch_size: refusing it is what the check below would do).
  int64_t round = unit;
  if (par.virtual_pipeline > 1 && __builtin_mul_overflow(unit, par.pipeline_parallel, &round)) {
    return InvalidArgumentError(
        "spec.data.global_batch_size: " + Int(d.global_batch_size) +
        " must give each pipeline a multiple of pipeline_parallel = " + Int(par.pipeline_parallel) +
        " micro-batches with virtual_pipeline > 1, which is past int64");
  }
  if (d.global_batch_size % round != 0) {
    return InvalidArgumentError(
        "spec.data.global_batch_size: " + Int(d.global_batch_size) +
        " must give each pipeline a multiple of pipeline_parallel = " + Int(par.pipeline_parallel) +
        " micro-batches with virtual_pipeline > 1 (a multiple of " + Int(round) + ")");
  }
  return CheckBatchRamp(d, round);
}

// data.split parses; evaluation needs a validation split of an indexed dataset.
Status CheckEvaluation(const JobSpec& s) {
  MOE_ASSIGN_OR_RETURN(const auto weights, ParseSplit(s.data.split, "spec.data.split"));
  if (s.training.eval_interval == 0) return OkStatus();
  if (s.data.source != "indexed") {
    return InvalidArgumentError(
        "spec.training.eval_interval: evaluation needs an indexed dataset with a validation split "
        "(spec.data.source is " +
        s.data.source + ")");
  }
  if (!(weights[1] > 0)) {
    return InvalidArgumentError(
        "spec.training.eval_interval: evaluation needs a validation split: spec.data.split gives "
        "valid a weight of 0 ('" +
        s.data.split + "'; e.g. \"95,5,0\")");
  }
  return OkStatus();
}

// Every batch of the ramp must split into whole micro-batches on every rank.
Status CheckBatchRamp(const DataConfig& d, int64_t unit) {
  const BatchRampConfig& r = d.batch_ramp;
  const std::string p = "spec.data.batch_ramp";
  if (r.start == 0) return OkStatus();
  if (r.start >= d.global_batch_size) {
    return InvalidArgumentError(p + ".start: " + Int(r.start) +
                                " must be below global_batch_size = " + Int(d.global_batch_size));
  }
  if (r.increment <= 0 || (d.global_batch_size - r.start) % r.increment != 0) {
    return InvalidArgumentError(p + ".increment: " + Int(r.increment) +
                                " must be > 0 and divide global_batch_size - start = " +
                                Int(d.global_batch_size - r.start));
  }
  if (r.start % unit != 0 || r.increment % unit != 0) {
    return InvalidArgumentError(
        p + ": start and increment must be multiples of " + Int(unit) +
        " (micro_batch_size x data-parallel size, x pipeline_parallel when interleaved)");
  }
  if (!(r.tokens > 0))
    return InvalidArgumentError(p + ".tokens: must be > 0 (the tokens over which the batch grows)");
  return OkStatus();
}

// spec.elastic: the smallest size must be a layout the job can run at (the same PP and EP, the
// global batch in whole micro-batches per rank).
Status CheckElastic(const JobSpec& s) {
  const int64_t min = s.elastic.min_data_parallel, dp = s.parallelism.data_parallel();
  if (min == 0) return OkStatus();
  const std::string p = "spec.elastic.min_data_parallel";
  if (min > dp)
    return InvalidArgumentError(p + ": " + Int(min) + " exceeds the job's data-parallel size " +
                                Int(dp));
  JobSpec small = s;
  small.parallelism.world_size = min * s.parallelism.pipeline_parallel;
  small.elastic = {};
  if (Status st = CheckLayout(small); !st.ok()) {
    return InvalidArgumentError(p + ": the job cannot run at data-parallel " + Int(min) +
                                " (world size " + Int(small.parallelism.world_size) +
                                "): " + st.message());
  }
  return OkStatus();
}

}  // namespace

std::vector<int64_t> ElasticWorldSizes(const JobSpec& s) {
  std::vector<int64_t> out;
  if (s.elastic.min_data_parallel <= 0) return out;
  for (int64_t dp = s.parallelism.data_parallel() - 1; dp >= s.elastic.min_data_parallel; --dp) {
    JobSpec small = s;
    small.parallelism.world_size = dp * s.parallelism.pipeline_parallel;
    if (CheckLayout(small).ok()) out.push_back(small.parallelism.world_size);
  }
  return out;
}

StatusOr<JobSpec> ParseJobSpec(const Node& doc) {
  if (doc.IsNull()) return InvalidArgumentError("the job document is empty");
  JobSpec spec;
  MOE_RETURN_IF_ERROR(SchemaOf<JobSpec>().Read(doc, "", &spec));
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

StatusOr<JobSpec> ParseJobSpecText(std::string_view text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text, kJobDocumentLimits));
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
  // Paths reach open(2) and execv(2) as C strings: a NUL would cut them after every check on the
  // whole.
  MOE_RETURN_IF_ERROR(CheckPathText("spec.data.path", s.data.path));
  MOE_RETURN_IF_ERROR(CheckPathText("spec.checkpoint.dir", s.checkpoint.dir));
  MOE_RETURN_IF_ERROR(CheckRelativeStaysBelow("spec.data.path", s.data.path));
  MOE_RETURN_IF_ERROR(CheckRelativeStaysBelow("spec.checkpoint.dir", s.checkpoint.dir));
  MOE_RETURN_IF_ERROR(CheckModelRules(s.model, "spec.model"));
  MOE_RETURN_IF_ERROR(CheckLayout(s));
  if (s.training.attention == "materialized" && s.resources.device == "cuda") {
    return InvalidArgumentError(
        "spec.training.attention: materialized is the CPU reference path (no CUDA kernel); use "
        "flash on cuda");
  }
  if (s.resources.precision == "fp32" &&
      s.resources.device == "cuda") {  // bf16 and fp8 emulate on CPU too
    return InvalidArgumentError(
        "spec.resources.precision: fp32 on cuda: CUDA ranks train in bf16 or fp8");
  }
  if (s.optimizer.min_lr > s.optimizer.lr) {
    return InvalidArgumentError("spec.optimizer.min_lr: must be in [0, lr], got " +
                                Num(s.optimizer.min_lr));
  }
  MOE_RETURN_IF_ERROR(CheckEvaluation(s));
  MOE_RETURN_IF_ERROR(CheckElastic(s));
  return ValidateSchedule(s.optimizer.lr_schedule, "spec.optimizer.lr_schedule");
}

StatusOr<std::array<double, 3>> ParseSplit(const std::string& split, const std::string& path) {
  std::array<double, 3> w = {1, 0, 0};
  if (split.empty()) return w;
  w = {0, 0, 0};
  size_t i = 0, at = 0;
  for (; at <= split.size() && i < 3; ++i) {
    const size_t comma = std::min(split.find_first_of(",/", at), split.size());
    const std::string part = split.substr(at, comma - at);
    char* end = nullptr;
    w[i] = std::strtod(part.c_str(), &end);
    if (part.empty() || end != part.c_str() + part.size() || !(w[i] >= 0) || !std::isfinite(w[i])) {
      return InvalidArgumentError(
          path + ": '" + split +
          "' is not up to three non-negative weights (train,valid,test), e.g. \"969,30,1\"");
    }
    at = comma + 1;
  }
  if (at <= split.size())
    return InvalidArgumentError(path + ": '" + split +
                                "' has more than three weights (train,valid,test)");
  if (!(w[0] > 0))
    return InvalidArgumentError(path + ": '" + split +
                                "' leaves nothing to train on (the train weight must be > 0)");
  return w;
}

Status ValidateSchedule(const Schedule& s, const std::string& path) {
  double prev = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const ScheduleSegment& g = s[i];
    const std::string at = path + "[" + std::to_string(i) + "]";
    const bool last = i + 1 == s.size();
    if (!g.until_tokens && !last)
      return InvalidArgumentError(at +
                                  ".until_tokens: missing (only the last segment may run forever)");
    if (g.until_tokens && *g.until_tokens <= prev) {
      return InvalidArgumentError(at + ".until_tokens: " + Num(*g.until_tokens) +
                                  " must be above the previous segment's end " + Num(prev));
    }
    if (g.shape != "constant" && !g.until_tokens) {
      return InvalidArgumentError(at + ".until_tokens: a " + g.shape + " segment needs an end");
    }
    if (g.until_tokens) prev = *g.until_tokens;
  }
  return OkStatus();
}

Node ModelConfigToNode(const ModelConfig& m) { return SchemaOf<ModelConfig>().Write(m); }

Node JobSpecToNode(const JobSpec& s) { return SchemaOf<JobSpec>().Write(s); }

std::string ModelFingerprint(const JobSpec& s) {
  // The shape matters, not the name it came from, nor the recipe (init, loss weights, schedules),
  // nor the layout: checkpoints store global tensors, so any layout can read them.
  ModelConfig shape = s.model;
  shape.preset.clear();
  shape.init_std = ModelConfig().init_std;
  shape.mtp_loss_weight = ModelConfig().mtp_loss_weight;
  shape.mtp_loss_weight_schedule.clear();
  shape.moe.bias_update_rate = MoeConfig().bias_update_rate;
  shape.moe.bias_update_schedule.clear();
  shape.moe.seq_aux_loss_coeff = MoeConfig().seq_aux_loss_coeff;
  return ToJson(ModelConfigToNode(shape));
}

}  // namespace moe
