// Hugging Face interop: a checkpoint (or a model) written as a DeepseekV3 directory (config.json,
// model.safetensors, split with an index when large), and such a directory read into a model's
// parameters. The tensor mapping is hf_layout.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/checkpoint/hf_layout.h"
#include "worker/engine/model/model.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::checkpoint {

struct HfWriteOptions {
  std::string dtype = "bf16";  // bf16 | fp32 | fp64 (the last for exact comparisons in tests)
  int64_t max_file_bytes = int64_t{5}
                           << 30;  // above this, model-0000N-of-0000M.safetensors + an index
  bool mtp_table_copies = true;    // MTP layers carry copies of the embedding and head, as released
  int64_t max_position_embeddings = 4096;
  // The sequence length the weights' rotary frequencies were computed for (YaRN applied above the
  // original length; HfConfigInfo::rope_length). 0: max_position_embeddings.
  int64_t rope_length = 0;
  // The SentencePiece model copied in as tokenizer.model, with tokenizer_config.json for
  // transformers' LlamaTokenizer and the special ids in config.json and generation_config.json.
  // Empty: no tokenizer files (ExportCheckpoint fills it from the run's data unless told not to).
  std::string tokenizer;
  bool tokenizer_from_run =
      true;  // ExportCheckpoint: the run's tokenizer when `tokenizer` is empty
  std::function<void(const std::string&)> progress;  // one line per file written
};

// Fills `dst` (host f32 or f64, the HF tensor's shape) with the HF tensor's values.
using HfSource = std::function<Status(const HfTensor& t, const Tensor& dst)>;

// Writes config.json, the weights of `m` (each tensor's values from `source`), and with a tokenizer
// tokenizer.model, tokenizer_config.json and generation_config.json, to `out_dir`. The same inputs
// give the same bytes.
Status WriteHfDirectory(const ModelConfig& m, const HfSource& source, const std::string& out_dir,
                        const HfWriteOptions& options);

// moe-export: the newest complete checkpoint in `checkpoint` (a checkpoint directory or one step_*
// directory in it), whatever layout wrote it, as a DeepseekV3 directory. Reads one tensor at a
// time. The tokenizer: options.tokenizer, else (tokenizer_from_run) the one the run's data names
// (RunTokenizerPath; FAILED_PRECONDITION when it cannot be found), else none.
Status ExportCheckpoint(const std::string& checkpoint, const std::string& out_dir,
                        const HfWriteOptions& options);

// moe-train --init-from: the weights of a DeepseekV3 directory into `model` (this rank's part: its
// experts), after checking config.json against the model; the expert bias from
// e_score_correction_bias. A tensor of another shape is an INVALID_ARGUMENT naming it.
Status LoadHfWeights(const std::string& dir, model::Model& model,
                     const parallel::ParallelContext& par);

// moe-export --hf: DeepseekV3 directory `dir` read as --init-from reads it (the whole model, on the
// CPU) and written again by the exporter, in `dtype` ("": its own). With its own dtype the files
// come out byte for byte as they went in when the exporter wrote them: nothing is lost either way.
Status RewriteHfDirectory(const std::string& dir, const std::string& out_dir,
                          const std::string& dtype);

// The options that write a model read from DeepseekV3 directory `dir` back as it was: its
// max_position_embeddings and rope length, its tokenizer.model (when it has one), its dtype.
StatusOr<HfWriteOptions> HfRewriteOptions(const std::string& dir);

// The values of a W = 1 model's tensors, for WriteHfDirectory (tests and the reference dump).
HfSource ModelSource(model::Model& model);

// For evaluating stored weights (moe-eval):
// The job spec a checkpoint was written with (its manifest) and the step directory used
// (`checkpoint` may be a checkpoint directory, whose newest complete step is taken, or one step_*
// directory).
StatusOr<JobSpec> CheckpointJobSpec(const std::string& checkpoint, std::string* step_dir);
// Reads this rank's weights (every parameter's value and the MoE biases) from a checkpoint step
// directory, whatever layout wrote it; no optimizer state.
Status LoadCheckpointWeights(const std::string& step_dir, model::Model& model);
// The model a Hugging Face DeepseekV3 directory's config.json describes (its conventions checked:
// CheckHfConventions), and in *rope_length the sequence length to build its rotary frequencies for
// (max_position_embeddings: above original_max_position_embeddings YaRN applies, which is what
// rope_scaling being present means).
StatusOr<ModelConfig> HfModelConfig(const std::string& dir, int64_t* rope_length = nullptr);

}  // namespace moe::checkpoint
