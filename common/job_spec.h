// The training job specification (the YAML of docs/job-spec.md), its model presets and its
// validation.
//
// One parser and one validator for every consumer: moe-train reads job files with it, the
// controller validates submitted specs with it (after protobuf's JSON mapping), and the FLOPs
// accounting reads the model section. Errors name the field by its path ("spec.model.moe.top_k:
// ...").
//
// Each struct is described once, in proto/moe/v1/job_spec.proto, which generates the struct and its
// table of fields with their checks (common/schema.h, common/job_spec_schema.h): reading, writing
// and per-field validation walk that table; the rules that span fields are in ValidateModel and
// ValidateJobSpec.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec_types.h"
#include "common/presets.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe {

// INVALID_ARGUMENT naming `path` when segments do not end in increasing order, a segment other than
// the last has no end, or a shape is unknown.
Status ValidateSchedule(const Schedule& s, const std::string& path);

// Parses a job document (already read as YAML or JSON). Unknown fields are errors; so is anything
// Validate() refuses.
StatusOr<JobSpec> ParseJobSpec(const Node& doc);
// The smaller world sizes an elastic job may run at (spec.elastic), largest first: data-parallel
// sizes from its own down to min_data_parallel at which the layout is valid (the same PP and EP,
// the global batch in whole micro-batches per rank). Empty for a job that is not elastic.
std::vector<int64_t> ElasticWorldSizes(const JobSpec& s);
StatusOr<JobSpec> ParseJobSpecText(std::string_view text);
StatusOr<JobSpec> LoadJobSpecFile(const std::string& path);

// Semantic checks with field paths (the model's here, the whole spec's in ValidateJobSpec).
Status ValidateModel(const ModelConfig& m, std::string_view path);
Status ValidateJobSpec(const JobSpec& spec);

// data.split as three non-negative weights (train, valid, test; "a,b" means test 0, "a" valid and
// test 0); errors name `path`. An empty split is {1, 0, 0}.
StatusOr<std::array<double, 3>> ParseSplit(const std::string& split, const std::string& path);

// The spec as a document (every field written out), for checkpoints, child processes and APIs.
Node JobSpecToNode(const JobSpec& spec);
Node ModelConfigToNode(const ModelConfig& m);

// A stable fingerprint of what a checkpoint must agree with to be resumed: the model's shape (not
// its layout: checkpoints move between layouts). A resume with a different one is refused.
std::string ModelFingerprint(const JobSpec& spec);

}  // namespace moe
