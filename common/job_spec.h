// The training job specification (the YAML of DESIGN.md), its model presets and its validation.
//
// One parser and one validator for every consumer: moe-train reads job files with it, the controller
// validates submitted specs with it (after protobuf's JSON mapping), and the FLOPs accounting reads
// the model section. Errors name the field by its path ("spec.model.moe.top_k: ...").
//
// Each struct below is described once, as a table of fields with their checks (common/schema.h,
// common/job_spec_schema.cc): reading, writing and per-field validation walk that table; the rules
// that span fields are in ValidateModel and ValidateJobSpec.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/yaml.h"

namespace moe {

struct AttentionConfig {
  // "mha": multi-head attention with RoPE (what the engine trains). "mla": DeepSeek's multi-head latent
  // attention, used for FLOPs accounting and planning of the real DeepSeek-V3 shape only.
  std::string type = "mha";
  int64_t q_lora_rank = 0;        // mla: 0 means no query compression
  int64_t kv_lora_rank = 0;       // mla
  int64_t qk_head_dim = 0;        // mla: qk_nope_head_dim
  int64_t qk_rope_head_dim = 0;   // mla
  int64_t v_head_dim = 0;         // mla

  bool operator==(const AttentionConfig&) const = default;
};

struct MoeConfig {
  int64_t num_experts = 8;
  int64_t top_k = 2;
  int64_t num_shared_experts = 1;
  int64_t ffn_hidden = 128;          // per routed (and per shared) expert
  int64_t num_groups = 1;            // expert groups for group-limited routing
  int64_t topk_groups = 1;           // groups kept per token
  std::string score_function = "sigmoid";  // sigmoid | softmax
  double route_scale = 1.0;
  double bias_update_rate = 1e-3;    // gamma of aux-loss-free balancing; 0 turns it off
  double seq_aux_loss_coeff = 1e-4;  // alpha of the sequence-wise balance loss; 0 turns it off

  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string preset;  // the preset it started from ("" when every field was given)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t first_k_dense = 0;      // the first k layers use a dense SwiGLU FFN instead of MoE
  int64_t dense_ffn_hidden = 0;
  int64_t mtp_depth = 0;          // multi-token prediction depth (accounting only; the engine uses 0)
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
  double init_std = 0.02;
  AttentionConfig attention;
  MoeConfig moe;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t num_moe_layers() const { return num_layers - first_k_dense; }
  bool IsMoeLayer(int64_t layer) const { return layer >= first_k_dense; }

  bool operator==(const ModelConfig&) const = default;
};

struct ParallelismConfig {
  int64_t world_size = 1;
  int64_t expert_parallel = 1;
  double timeout_seconds = 60.0;  // a collective that waits longer fails the job with a clear error
  int64_t data_parallel() const { return world_size / expert_parallel; }

  bool operator==(const ParallelismConfig&) const = default;
};

struct PlacementConfig {
  std::string expert_group_within = "rack";  // rack | node | any

  bool operator==(const PlacementConfig&) const = default;
};

struct DataConfig {
  std::string path;           // prefix of a Megatron indexed dataset (<path>.bin, <path>.idx)
  std::string source = "indexed";  // indexed | synthetic (uniform random tokens, for benchmarks)
  int64_t seq_length = 256;
  int64_t micro_batch_size = 8;
  int64_t global_batch_size = 16;

  bool operator==(const DataConfig&) const = default;
};

struct OptimizerConfig {
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 50;
  int64_t decay_steps = 0;  // 0: training.steps
  double weight_decay = 0.1;
  double grad_clip = 1.0;   // 0 turns clipping off
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;

  bool operator==(const OptimizerConfig&) const = default;
};

struct TrainingConfig {
  int64_t steps = 300;
  uint64_t seed = 1234;
  int64_t log_interval = 1;

  bool operator==(const TrainingConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;
  int64_t interval_steps = 0;  // 0: only at the end
  int64_t keep_last = 0;       // 0: keep every checkpoint

  bool operator==(const CheckpointConfig&) const = default;
};

struct ResourcesConfig {
  std::string device = "cpu";  // cpu | cuda

  bool operator==(const ResourcesConfig&) const = default;
};

struct JobSpec {
  std::string api_version = "moe/v1";
  std::string kind = "TrainingJob";
  std::string name;
  int64_t priority = 0;
  ModelConfig model;
  ParallelismConfig parallelism;
  PlacementConfig placement;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  ResourcesConfig resources;
  int64_t max_restarts = 3;

  int64_t decay_steps() const { return optimizer.decay_steps > 0 ? optimizer.decay_steps : training.steps; }
  // Micro batches each rank runs per step (gradient accumulation).
  int64_t micro_batches_per_rank() const {
    return data.global_batch_size / (data.micro_batch_size * parallelism.world_size);
  }

  bool operator==(const JobSpec&) const = default;
};

// Names of the built-in presets: tiny, small, deepseek-v3-671b.
std::vector<std::string> ModelPresetNames();
StatusOr<ModelConfig> ModelPreset(const std::string& name);

// Parses a job document (already read as YAML or JSON). Unknown fields are errors; so is anything
// Validate() refuses.
StatusOr<JobSpec> ParseJobSpec(const Node& doc);
StatusOr<JobSpec> ParseJobSpecText(std::string_view text);
StatusOr<JobSpec> LoadJobSpecFile(const std::string& path);

// Semantic checks with field paths. `for_training` adds what the engine needs to run the job (an
// attention type it implements, a data path).
Status ValidateModel(const ModelConfig& m, std::string_view path);
Status ValidateJobSpec(const JobSpec& spec);

// The spec as a document (every field written out), for checkpoints, child processes and APIs.
Node JobSpecToNode(const JobSpec& spec);
Node ModelConfigToNode(const ModelConfig& m);

// A stable fingerprint of what a checkpoint must agree with to be resumed (model shape, parallel
// layout, data shape): a resume with a different one is refused.
std::string ModelFingerprint(const JobSpec& spec);

}  // namespace moe
