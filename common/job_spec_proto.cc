#include "common/job_spec_proto.h"

#include <google/protobuf/util/json_util.h>

namespace moe {

std::string MessageToJson(const google::protobuf::Message& m, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = pretty;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

Status MessageFromJson(const std::string& json, google::protobuf::Message* m) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, m, o);
  if (!st.ok()) return InvalidArgumentError(std::string(st.message()));
  return OkStatus();
}

StatusOr<JobSpec> SpecFromProto(const moe::v1::TrainingJob& job) {
  // preserve_proto_field_names gives the YAML names except apiVersion.
  auto doc = ParseYaml(MessageToJson(job));
  if (!doc.ok()) return InternalError("spec to JSON: " + doc.status().message());
  if (Node* v = doc->FindMutable("api_version")) {
    Node copy = *v;
    Node renamed = Node::Map();
    for (const auto& [k, val] : doc->items()) renamed.Set(k == "api_version" ? "apiVersion" : k, val);
    *doc = renamed;
    (void)copy;
  }
  return ParseJobSpec(*doc);
}

std::string SpecToJson(const JobSpec& spec) { return ToJson(JobSpecToNode(spec)); }

moe::v1::TrainingJob SpecToProto(const JobSpec& spec) {
  moe::v1::TrainingJob out;
  // JobSpecToNode writes only fields the proto has, so this cannot fail.
  (void)MessageFromJson(SpecToJson(spec), &out);
  return out;
}

StatusOr<moe::v1::TrainingJob> TrainingJobFromText(const std::string& text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text));
  if (!doc.IsMap()) return InvalidArgumentError("the job document must be a mapping (apiVersion, kind, metadata, spec)");
  moe::v1::TrainingJob job;
  Status st = MessageFromJson(ToJson(doc), &job);
  if (!st.ok()) return InvalidArgumentError("the job document does not match moe.v1.TrainingJob: " + st.message());
  return job;
}

}  // namespace moe
