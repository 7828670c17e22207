// The training job specification's types (the YAML of docs/job-spec.md): plain structs with their
// defaults, below everything that reads, writes or checks them (common/job_spec.h: parsing and
// validation; common/job_spec_schema.h: each struct's table of fields; common/presets.h: the model
// presets).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe {

// A value that changes with the tokens trained so far: piecewise segments, each ending at
// `until_tokens` (the last may run forever). Used for the learning rate, the bias update rate gamma
// and the MTP loss weight lambda, as DeepSeek-V3's recipe gives them (in tokens, so a batch-size
// ramp does not move them).
struct ScheduleSegment {
  std::optional<double> until_tokens;  // the segment ends when this many tokens have been trained
  std::string shape = "constant";  // constant (value) | linear (from -> to) | cosine (from -> to)
  double value = 0;
  double from = 0, to = 0;

  bool operator==(const ScheduleSegment&) const = default;
};
using Schedule = std::vector<ScheduleSegment>;
// The schedule's value after `tokens` trained tokens (within a segment, linear/cosine by the share
// of the segment done). An empty schedule is `fallback`.
double ScheduleValue(const Schedule& s, double tokens, double fallback);

struct AttentionConfig {
  // "mha": multi-head attention with (half-split) RoPE on q and k. "mla": DeepSeek's multi-head
  // latent attention (docs/reference/deepseek-v3-architecture.md): low-rank q and kv, one shared
  // rotary key, pairwise RoPE on the rope dims, query/key heads of qk_nope + qk_rope, values of v.
  std::string type = "mha";
  int64_t q_lora_rank =
      0;  // mla: 0 means no query compression (one projection, as DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;      // mla
  int64_t qk_nope_head_dim = 0;  // mla
  int64_t qk_rope_head_dim = 0;  // mla
  int64_t v_head_dim = 0;        // mla

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const AttentionConfig&) const = default;
};

// YaRN context extension of RoPE (deepseek-v3-architecture.md): applied only when the run's
// sequence length exceeds original_max_position_embeddings.
struct RopeScalingConfig {
  std::string type = "none";  // none | yarn
  double factor = 1;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32, beta_slow = 1;
  double mscale = 1, mscale_all_dim = 1;

  bool operator==(const RopeScalingConfig&) const = default;
};

struct MoeConfig {
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t num_shared_experts = 1;
  int64_t ffn_hidden = 128;                // per routed (and per shared) expert
  int64_t num_groups = 1;                  // expert groups for group-limited routing
  int64_t topk_groups = 1;                 // groups kept per token
  std::string score_function = "sigmoid";  // sigmoid | softmax
  double route_scale = 1.0;
  // The per-expert selection bias of aux-loss-free balancing. Default: on for sigmoid routing. Once
  // the model has one it always steers selection, whatever gamma is (gamma = 0 keeps the learned
  // bias).
  std::optional<bool> expert_bias;
  double bias_update_rate = 1e-3;  // gamma: how fast the bias moves; 0 freezes it
  Schedule bias_update_schedule;  // gamma by tokens trained (overrides bias_update_rate when given)
  double seq_aux_loss_coeff = 1e-4;  // alpha of the sequence-wise balance loss; 0 turns it off

  bool has_bias() const { return expert_bias.value_or(score_function == "sigmoid"); }
  double BiasUpdateRate(double tokens) const {
    return ScheduleValue(bias_update_schedule, tokens, bias_update_rate);
  }
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string preset;  // the preset it started from ("" when every field was given)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t first_k_dense = 0;  // the first k layers use a dense SwiGLU FFN instead of MoE
  int64_t dense_ffn_hidden = 0;
  int64_t mtp_depth = 0;         // multi-token prediction depths D (0: none)
  double mtp_loss_weight = 0.3;  // lambda: the loss adds lambda / D * sum of the depths' losses
  Schedule
      mtp_loss_weight_schedule;  // lambda by tokens trained (overrides mtp_loss_weight when given)
  double rope_theta = 10000.0;
  RopeScalingConfig rope_scaling;
  double norm_eps = 1e-6;
  // Weights start N(0, init_std), the output projections (attention's o_proj, the FFNs' and
  // experts' down projections) N(0, init_std / sqrt(2 * num_layers)) (Megatron's rule); norms at 1.
  // (DeepSeek-V3: 0.006.)
  double init_std = 0.02;
  AttentionConfig attention;
  MoeConfig moe;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t num_moe_layers() const { return num_layers - first_k_dense; }
  bool IsMoeLayer(int64_t layer) const { return layer >= first_k_dense; }
  bool is_mla() const { return attention.type == "mla"; }
  // An MTP block is a MoE block when the main model's last block is.
  bool MtpIsMoe() const { return num_moe_layers() > 0; }
  double MtpLossWeight(double tokens) const {
    return ScheduleValue(mtp_loss_weight_schedule, tokens, mtp_loss_weight);
  }
  // MTP trains when the model has depths and lambda is not zero throughout (a model whose lambda is
  // always 0 skips them: no compute, no FLOPs).
  bool MtpTrains() const;

  bool operator==(const ModelConfig&) const = default;
};

// W = PP x DP ranks in Megatron's order (EP innermost, then DP, then PP): rank r is pipeline stage
// r / DP, data-parallel rank r % DP; EP groups are consecutive ranks inside a stage's DP ranks, so
// expert-parallel all-to-all stays in a rack while stages may cross racks. Dense weights are
// replicated over DP, each expert over DP / EP ranks (the expert-data-parallel group).
struct ParallelismConfig {
  int64_t world_size = 1;
  int64_t expert_parallel = 1;
  int64_t pipeline_parallel = 1;
  int64_t virtual_pipeline = 1;  // model chunks per pipeline rank (interleaved 1F1B)
  std::vector<std::string>
      pipeline_layout;            // per virtual stage (common/pipeline_layout.h); empty: even
  double timeout_seconds = 60.0;  // a collective that waits longer fails the job with a clear error
  // The data-parallel gradient reduction in buckets of at least this many MB, each started as soon
  // as the backward has finished its gradients (overlapped with the rest of the backward); 0: one
  // reduction after the backward.
  double grad_bucket_mb = 25.0;
  // Dense data parallelism (DP) and the expert-data-parallel degree (DP / EP).
  int64_t data_parallel() const { return world_size / pipeline_parallel; }
  int64_t expert_data_parallel() const { return data_parallel() / expert_parallel; }

  bool operator==(const ParallelismConfig&) const = default;
};

struct PlacementConfig {
  std::string expert_group_within = "rack";  // rack | node | any

  bool operator==(const PlacementConfig&) const = default;
};

// The global batch grows from `start` sequences by `increment` in equal steps over the first
// `tokens` trained tokens, then stays at data.global_batch_size (DeepSeek-V3: 3072 -> 15360 over
// 469B tokens). start = 0: no ramp.
struct BatchRampConfig {
  int64_t start = 0;
  int64_t increment = 0;
  double tokens = 0;

  bool operator==(const BatchRampConfig&) const = default;
};

struct DataConfig {
  std::string path;                // prefix of a Megatron indexed dataset (<path>.bin, <path>.idx)
  std::string source = "indexed";  // indexed | synthetic (uniform random tokens, for benchmarks)
  int64_t seq_length = 256;
  int64_t micro_batch_size = 8;
  int64_t global_batch_size = 16;
  BatchRampConfig
      batch_ramp;  // a growing global batch at the start (Megatron's --rampup-batch-size)
  // Megatron's --split: weights for train, valid and test over the dataset's documents, in order
  // ("969,30,1"); empty: every document trains. ParseSplit gives the three weights.
  std::string split;

  bool operator==(const DataConfig&) const = default;
};

struct OptimizerConfig {
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 50;
  int64_t decay_steps = 0;  // 0: training.steps
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 turns clipping off
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  // The learning rate by tokens trained (DeepSeek-V3's warm-up, constant, cosine, constant steps);
  // when given it replaces lr/min_lr/warmup_steps/decay_steps.
  Schedule lr_schedule;
  std::string moments_dtype =
      "fp32";  // fp32 | bf16: AdamW's moments (DeepSeek-V3 keeps them in bf16)
  // ZeRO-1: master weights and moments sharded over the data-parallel groups, gradients
  // reduce-scattered, weights all-gathered. Absent: on when data_parallel() > 1.
  std::optional<bool> distributed;
  bool Distributed(int64_t data_parallel) const { return distributed.value_or(data_parallel > 1); }

  bool operator==(const OptimizerConfig&) const = default;
};

struct TrainingConfig {
  int64_t steps = 300;
  uint64_t seed = 1234;
  int64_t log_interval = 1;
  // Selective recompute: modules whose activations are computed again in the backward instead of
  // kept (core_attn, mla_up_proj, mlp, moe_act, full). Results are bitwise those without.
  std::vector<std::string> recompute;
  // The attention core: flash (tiled, O(S) memory: only each row's log-sum-exp kept) or
  // materialized (the textbook [B, H, S, S] probabilities kept; CPU only, a reference for memory
  // and speed).
  std::string attention = "flash";
  // Evaluation on the validation split every eval_interval steps and at the end (0: never), over
  // eval_batches global batches of it, the same ones each time.
  int64_t eval_interval = 0;
  int64_t eval_batches = 1;
  // Gradients summed in f64, one contribution per micro-batch (per source rank for experts),
  // reduced in f64 and rounded once: every layout with the same micro batch size trains bitwise
  // like W = 1, at 8 more bytes per parameter and a pass over each contribution. Absent: on for
  // cpu, off for cuda.
  std::optional<bool> deterministic;
  bool Deterministic(bool on_cpu) const { return deterministic.value_or(on_cpu); }

  bool operator==(const TrainingConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;
  int64_t interval_steps = 0;  // 0: only at the end
  int64_t keep_last = 0;       // 0: keep every checkpoint
  // Saves copy the state to host memory at the step boundary and write it in the background while
  // training goes on (checkpoint/async_checkpoint.h); false: the whole write stalls the step.
  bool async = true;

  bool operator==(const CheckpointConfig&) const = default;
};

struct ResourcesConfig {
  std::string device = "cpu";  // cpu | cuda
  // fp32 (cpu) | bf16 (cuda) | fp8 (cuda; planned by moectl plan, not trained by the engine yet).
  // Absent: fp32 on cpu, bf16 on cuda.
  std::optional<std::string> precision;

  bool operator==(const ResourcesConfig&) const = default;
};

// spec.elastic: the smallest data-parallel size the job may shrink to (0: not elastic).
struct ElasticConfig {
  int64_t min_data_parallel = 0;

  bool operator==(const ElasticConfig&) const = default;
};

// metadata.depends_on: a job this one waits for (docs/job-spec.md).
struct JobDependency {
  std::string job;                      // an id, or a name (the controller stores the id)
  std::string condition = "succeeded";  // succeeded | finished (any final state)

  bool operator==(const JobDependency&) const = default;
};

struct JobSpec {
  std::string api_version = "moe/v1";
  std::string kind = "TrainingJob";
  std::string name;
  int64_t priority = 0;
  // A name the controller maps to a priority, and whether jobs of it may be preempted
  // (moe-controller
  // --priority-class); empty: metadata.priority as it is, preemptible.
  std::string priority_class;
  // Kubernetes-style labels, for selecting jobs (moectl get jobs -l team=research); see
  // ValidLabels.
  std::map<std::string, std::string> labels;
  // A queue of the controller's --queues file (empty: its default queue); see controller/queues.h.
  std::string queue;
  std::vector<JobDependency> depends_on;
  ModelConfig model;
  ParallelismConfig parallelism;
  PlacementConfig placement;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  ResourcesConfig resources;
  int64_t max_restarts = 3;
  ElasticConfig elastic;
  double time_limit = 0;  // seconds of held workers over all attempts; 0: none

  int64_t decay_steps() const {
    return optimizer.decay_steps > 0 ? optimizer.decay_steps : training.steps;
  }
  // Micro batches each pipeline runs per step (gradient accumulation) at the full global batch.
  int64_t micro_batches_per_rank() const {
    return data.global_batch_size / (data.micro_batch_size * parallelism.data_parallel());
  }
  // The global batch (sequences) of a step that starts after `tokens` trained tokens (the ramp).
  int64_t GlobalBatchAt(double tokens) const;
  // The tokens `steps` steps train, the batch ramp included (moectl plan's budget).
  double TokensAfter(int64_t steps) const;

  bool operator==(const JobSpec&) const = default;
};

}  // namespace moe
