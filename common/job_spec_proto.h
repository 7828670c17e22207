// The job spec between its protobuf form (the API) and the engine's (common/job_spec.h): one reader
// and one validator for both (the generated tables of common/job_spec_schema.h).
//
// A document key is the proto field's name, or its json_name where job_spec.proto sets one
// (apiVersion): protobuf's JSON parser reads both, and DocumentKey() below is what the proto ->
// document direction and the schema test use.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "common/yaml.h"
#include "moe/v1/job.pb.h"

namespace moe {

// Semantic validation with field paths; the result is the spec with every default filled in.
// ReadSpecProto, then ValidateJobSpec.
StatusOr<JobSpec> SpecFromProto(const moe::v1::TrainingJob& job);
// Every field written out (what the controller stores and hands to workers): WriteSpecProto.
moe::v1::TrainingJob SpecToProto(const JobSpec& spec);

// The fields `job` has set, read over *out (which starts as the defaults) field by field, as the
// table's reader reads the same message as a document
// (SchemaOf<JobSpec>().Read(MessageToNode(job)): presets applied after their field, the spec
// section required, non-finite numbers refused, the same paths and words in its errors) without the
// document between: generated from job_spec.proto with the structs (job_spec_proto.gen.cc). No
// semantic checks (ValidateJobSpec).
Status ReadSpecProto(const moe::v1::TrainingJob& job, JobSpec* out);
// Every field of `spec` into *out (an absent optional left out), as MessageFromNode(JobSpecToNode
// (spec)) would write it. job_spec_proto_test holds both to the tree's on random messages.
void WriteSpecProto(const JobSpec& spec, moe::v1::TrainingJob* out);
// A YAML or JSON document to the proto: read as moe-train reads it (the schema reader: field paths,
// "did you mean"), then parsed by protobuf (unknown fields rejected).
StatusOr<moe::v1::TrainingJob> TrainingJobFromText(const std::string& text);
// What moectl submits: the document read and validated as the controller and moe-train will
// (ParseJobSpec: field paths, cross-field rules), and that checked spec as the wire form
// (SpecToProto, every default filled in): what was checked is what is sent.
StatusOr<moe::v1::TrainingJob> CheckedTrainingJob(const std::string& text);
// A document (keys by DocumentKey) to a protobuf message, field by field through reflection: no
// text in between. Unknown keys and values of the wrong type are refused, naming the path below
// `path`. The inverse of MessageToNode.
Status MessageFromNode(const Node& node, google::protobuf::Message* m,
                       const std::string& path = "");

// The key of a proto field in the job document: its json_name where the .proto sets one, else its
// name.
const std::string& DocumentKey(const google::protobuf::FieldDescriptor& field);
// The fields a message has set, as a document (keys by DocumentKey).
Node MessageToNode(const google::protobuf::Message& m);

}  // namespace moe
