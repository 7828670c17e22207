#include "common/job_spec_proto.h"

#include <google/protobuf/util/json_util.h>

#include <map>

#include "common/check.h"
#include "common/job_spec_schema.h"
#include "common/schema.h"

namespace moe {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// One value of a field (`index` < 0: the singular field, else that element of a repeated one). The
// types are the schema's (job_spec_schema_test keeps moe.v1.TrainingJob to them).
Node ValueToNode(const Message& m, const FieldDescriptor& f, int index) {
  const auto* r = m.GetReflection();
  const bool one = index < 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
      return Codec<int64_t>::Write(one ? r->GetInt64(m, &f) : r->GetRepeatedInt64(m, &f, index));
    case FieldDescriptor::CPPTYPE_UINT64:
      return Codec<uint64_t>::Write(one ? r->GetUInt64(m, &f) : r->GetRepeatedUInt64(m, &f, index));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Codec<double>::Write(one ? r->GetDouble(m, &f) : r->GetRepeatedDouble(m, &f, index));
    case FieldDescriptor::CPPTYPE_BOOL:
      return Codec<bool>::Write(one ? r->GetBool(m, &f) : r->GetRepeatedBool(m, &f, index));
    case FieldDescriptor::CPPTYPE_STRING:
      return Codec<std::string>::Write(one ? r->GetString(m, &f)
                                           : r->GetRepeatedString(m, &f, index));
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToNode(one ? r->GetMessage(m, &f) : r->GetRepeatedMessage(m, &f, index));
    default:
      MOE_CHECK(false) << f.full_name() << ": a type the job spec's schema does not have";
      return Node();
  }
}

}  // namespace

std::string DocumentKey(const FieldDescriptor& field) {
  return field.has_json_name() ? field.json_name() : field.name();
}

Node MessageToNode(const Message& m) {
  Node node = Node::Map();
  std::vector<const FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);  // the set ones: presence survives
  for (const FieldDescriptor* f : fields) {
    if (!f->is_repeated()) {
      node.Set(DocumentKey(*f), ValueToNode(m, *f, -1));
      continue;
    }
    if (f->is_map()) {  // string keys (the schema's maps); reflection's order is unspecified: sorted
      std::map<std::string, Node> entries;
      const int n = m.GetReflection()->FieldSize(m, f);
      for (int i = 0; i < n; ++i) {
        const Message& entry = m.GetReflection()->GetRepeatedMessage(m, f, i);
        const FieldDescriptor* key = entry.GetDescriptor()->map_key();
        entries[entry.GetReflection()->GetString(entry, key)] = ValueToNode(entry, *entry.GetDescriptor()->map_value(), -1);
      }
      Node map = Node::Map();
      for (auto& [k, v] : entries) map.Set(k, std::move(v));
      node.Set(DocumentKey(*f), std::move(map));
      continue;
    }
    Node list = Node::List();
    const int n = m.GetReflection()->FieldSize(m, f);
    for (int i = 0; i < n; ++i) list.Append(ValueToNode(m, *f, i));
    node.Set(DocumentKey(*f), std::move(list));
  }
  return node;
}

Status MessageFromJson(const std::string& json, Message* m) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  auto st = google::protobuf::util::JsonStringToMessage(json, m, o);
  if (!st.ok()) return InvalidArgumentError(std::string(st.message()));
  return OkStatus();
}

StatusOr<JobSpec> SpecFromProto(const moe::v1::TrainingJob& job) {
  return ParseJobSpec(MessageToNode(job));
}

std::string SpecToJson(const JobSpec& spec) { return ToJson(JobSpecToNode(spec)); }

moe::v1::TrainingJob SpecToProto(const JobSpec& spec) {
  moe::v1::TrainingJob out;
  const Status st = MessageFromJson(SpecToJson(spec), &out);
  MOE_CHECK(st.ok()) << "the job spec's schema and moe.v1.TrainingJob disagree: " << st.message();
  return out;
}

StatusOr<moe::v1::TrainingJob> TrainingJobFromText(const std::string& text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text, kJobDocumentLimits));
  if (!doc.IsMap()) {
    return InvalidArgumentError(
        "the job document must be a mapping (apiVersion, kind, metadata, spec)");
  }
  // moe-train's reader first (one code path, one set of messages: a misspelt key gets its field path
  // and "did you mean"); protobuf's parser then builds the API's form. The values are checked by
  // SpecFromProto (ValidateJobSpec, as moe-train does) where the job is accepted.
  JobSpec read;
  MOE_RETURN_IF_ERROR(SchemaOf<JobSpec>().Read(doc, "", &read));
  moe::v1::TrainingJob job;
  Status st = MessageFromJson(ToJson(doc), &job);
  if (!st.ok()) {
    return InvalidArgumentError("the job document does not match moe.v1.TrainingJob: " +
                                st.message());
  }
  return job;
}

}  // namespace moe
