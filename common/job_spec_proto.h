// The job spec between its protobuf form (the API) and the engine's (common/job_spec.h), through
// protobuf's JSON mapping: one validator for both.
#pragma once

#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "moe/v1/job.pb.h"

namespace moe {

// Semantic validation with field paths; the result is the spec with every default filled in.
StatusOr<JobSpec> SpecFromProto(const moe::v1::TrainingJob& job);
// Every field written out (what the controller stores and hands to workers).
moe::v1::TrainingJob SpecToProto(const JobSpec& spec);
// A YAML or JSON document to the proto, unknown fields rejected (protobuf's JSON parser).
StatusOr<moe::v1::TrainingJob> TrainingJobFromText(const std::string& text);
// The spec as JSON (preserving YAML's field names), e.g. for moe-train --config.
std::string SpecToJson(const JobSpec& spec);
// Protobuf messages as JSON (proto field names) and back.
std::string MessageToJson(const google::protobuf::Message& m, bool pretty = false);
Status MessageFromJson(const std::string& json, google::protobuf::Message* m);

}  // namespace moe
