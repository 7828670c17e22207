// Parameter counts of a model, per component, total and activated per token (each token uses top_k
// of the routed experts): what `moe-train --describe` prints and what memory accounting builds on.
// Computed from the configuration alone, so it serves the 671B model on any machine; a unit test
// checks it against the engine's own parameters for small models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"

namespace moe {

struct ParamComponent {
  std::string name;  // "embedding", "attention (MLA) x61", ...
  double total = 0;
  double activated = 0;  // per token
};

struct ParamCounts {
  std::vector<ParamComponent> main;  // the model that serves: embedding, blocks, final norm, head
  std::vector<ParamComponent>
      mtp;               // the MTP depths' own weights (they share the embedding and head)
  double total() const;  // the main model's (how DeepSeek-V3's "671B" is counted)
  double activated() const;
  double mtp_total() const;
  double mtp_activated() const;
};

ParamCounts CountParameters(const ModelConfig& m);

// Per-block counts, for layouts that place blocks on pipeline stages.
double AttentionParams(const ModelConfig& m);
double BlockParams(const ModelConfig& m, bool moe);  // norms + attention + FFN or MoE
double BlockExpertParams(const ModelConfig& m);      // its routed experts (all of them)

// "671.0B", "37.55B", "926.7M", "2.4k".
std::string HumanCount(double n);

}  // namespace moe
