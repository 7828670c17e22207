// What each pipeline stage holds: parallelism.pipeline_layout, or an even split.
//
// The model runs as PP x VPP virtual stages; virtual stage v lives on pipeline rank v % PP as that
// rank's model chunk v / PP (Megatron's interleaving). A layout names, per virtual stage, what it
// holds, in Megatron's letters:
//   E  the embedding (the first stage, first)
//   t  one transformer block (in model order over the stages)
//   m  one multi-token-prediction depth (the last stage, before L)
//   L  the final norm, the output head and the loss (the last stage, last)
// `X*N` repeats a letter, `(...)*N` a group, `|` ends a stage, spaces and commas are ignored. The
// spec gives either one string per stage (["Et*3", "t*4", ..., "t*2mL"]) or Megatron's single
// string
// (["Et|(tt|)*30mL"]); the elements of the list are joined with `|`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

struct JobSpec;
struct ModelConfig;

struct StageLayout {
  bool embedding = false;
  int64_t first_layer = 0;  // global index of its first transformer block
  int64_t num_layers = 0;
  int64_t mtp = 0;  // MTP depths (all on the last stage)
  bool loss = false;

  bool operator==(const StageLayout&) const = default;
};

// The layout's text expanded and split into stages, without checks against a model (errors name
// `path`).
StatusOr<std::vector<std::string>> ExpandPipelineLayout(const std::vector<std::string>& layout,
                                                        const std::string& path);

// The stages of `spec`: its pipeline_layout, checked against the model and PP x VPP, or the even
// split (blocks spread as evenly as they go, the extra ones on the stages after the first). Errors
// name spec.parallelism.pipeline_layout and say what does not fit.
StatusOr<std::vector<StageLayout>> ResolvePipelineLayout(const JobSpec& spec);

// The even split of `model` over `stages` virtual stages.
std::vector<StageLayout> EvenPipelineLayout(const ModelConfig& model, int64_t stages);

// The stage as layout text ("Et*3", "t*2mL").
std::string StageLayoutString(const StageLayout& s);

}  // namespace moe
