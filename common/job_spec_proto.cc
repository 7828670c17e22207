#include "common/job_spec_proto.h"

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

const std::string& DocumentKey(const FieldDescriptor& field) {
  return field.has_json_name() ? field.json_name() : field.name();
}

Node MessageToNode(const Message& m) {
  Node node = Node::Map();
  std::vector<const FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);  // the set ones: presence survives
  node.Reserve(fields.size());                // each once: added, not searched for
  for (const FieldDescriptor* f : fields) {
    if (!f->is_repeated()) {
      node.AddNew(DocumentKey(*f), ValueToNode(m, *f, -1));
      continue;
    }
    if (f->is_map()) {  // string keys (the schema's maps); reflection's order is unspecified:
                        // sorted
      std::map<std::string, Node> entries;
      const int n = m.GetReflection()->FieldSize(m, f);
      for (int i = 0; i < n; ++i) {
        const Message& entry = m.GetReflection()->GetRepeatedMessage(m, f, i);
        const FieldDescriptor* key = entry.GetDescriptor()->map_key();
        entries[entry.GetReflection()->GetString(entry, key)] =
            ValueToNode(entry, *entry.GetDescriptor()->map_value(), -1);
      }
      Node map = Node::Map();
      map.Reserve(entries.size());
      for (auto& [k, v] : entries) map.AddNew(k, std::move(v));
      node.AddNew(DocumentKey(*f), std::move(map));
      continue;
    }
    Node list = Node::List();
    const int n = m.GetReflection()->FieldSize(m, f);
    list.Reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) list.Append(ValueToNode(m, *f, i));
    node.AddNew(DocumentKey(*f), std::move(list));
  }
  return node;
}

namespace {

// One scalar or message value of field `f` from `v`: set (`add` false) or appended (`add` true).
Status PutValue(const Node& v, const std::string& path, const FieldDescriptor& f, bool add,
                Message* m) {
  const auto* r = m->GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t x = 0;
      MOE_RETURN_IF_ERROR(Codec<int64_t>::Read(v, path, &x));
      add ? r->AddInt64(m, &f, x) : r->SetInt64(m, &f, x);
      return OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t x = 0;
      MOE_RETURN_IF_ERROR(Codec<uint64_t>::Read(v, path, &x));
      add ? r->AddUInt64(m, &f, x) : r->SetUInt64(m, &f, x);
      return OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double x = 0;
      MOE_RETURN_IF_ERROR(Codec<double>::Read(v, path, &x));
      add ? r->AddDouble(m, &f, x) : r->SetDouble(m, &f, x);
      return OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool x = false;
      MOE_RETURN_IF_ERROR(Codec<bool>::Read(v, path, &x));
      add ? r->AddBool(m, &f, x) : r->SetBool(m, &f, x);
      return OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string x;
      MOE_RETURN_IF_ERROR(Codec<std::string>::Read(v, path, &x));
      add ? r->AddString(m, &f, std::move(x)) : r->SetString(m, &f, std::move(x));
      return OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageFromNode(v, add ? r->AddMessage(m, &f) : r->MutableMessage(m, &f), path);
    default:
      return InvalidArgumentError(path + ": a type the job spec's schema does not have");
  }
}

Status SetValue(const Node& v, const std::string& path, const FieldDescriptor& f, Message* m) {
  if (v.IsNull()) return OkStatus();  // absent: the field stays unset
  if (f.is_map()) {
    if (!v.IsMap())
      return InvalidArgumentError(path + ": expected a mapping, got " + std::string(v.KindName()));
    for (const auto& [key, value] : v.items()) {
      Message* entry = m->GetReflection()->AddMessage(m, &f);
      entry->GetReflection()->SetString(entry, entry->GetDescriptor()->map_key(), key);
      MOE_RETURN_IF_ERROR(
          PutValue(value, path + "." + key, *entry->GetDescriptor()->map_value(), false, entry));
    }
    return OkStatus();
  }
  if (!f.is_repeated()) return PutValue(v, path, f, false, m);
  if (!v.IsList())
    return InvalidArgumentError(path + ": expected a list, got " + std::string(v.KindName()));
  for (size_t i = 0; i < v.elements().size(); ++i) {
    MOE_RETURN_IF_ERROR(
        PutValue(v.elements()[i], path + "[" + std::to_string(i) + "]", f, true, m));
  }
  return OkStatus();
}

}  // namespace

Status MessageFromNode(const Node& node, Message* m, const std::string& path) {
  if (!node.IsMap()) {
    return InvalidArgumentError((path.empty() ? "the document" : path) +
                                ": expected a mapping, got " + std::string(node.KindName()));
  }
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  for (const auto& [key, value] : node.items()) {
    const std::string at = path.empty() ? key : path + "." + key;
    const FieldDescriptor* f = nullptr;
    for (int i = 0; i < d->field_count() && f == nullptr; ++i) {
      if (DocumentKey(*d->field(i)) == key) f = d->field(i);
    }
    if (f == nullptr) return InvalidArgumentError(at + ": not a field of " + d->full_name());
    MOE_RETURN_IF_ERROR(SetValue(value, at, *f, m));
  }
  return OkStatus();
}

StatusOr<JobSpec> SpecFromProto(const moe::v1::TrainingJob& job) {
  JobSpec spec;
  MOE_RETURN_IF_ERROR(ReadSpecProto(job, &spec));
  MOE_RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

moe::v1::TrainingJob SpecToProto(const JobSpec& spec) {
  moe::v1::TrainingJob out;
  WriteSpecProto(spec, &out);
  return out;
}

StatusOr<moe::v1::TrainingJob> TrainingJobFromText(const std::string& text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text, kJobDocumentLimits));
  if (!doc.IsMap()) {
    return InvalidArgumentError(
        "the job document must be a mapping (apiVersion, kind, metadata, spec)");
  }
  // moe-train's reader first (one code path, one set of messages: a misspelt key gets its field
  // path and "did you mean"); the document's tree then becomes the API's form field by field. The
  // values are checked by SpecFromProto (ValidateJobSpec, as moe-train does) where the job is
  // accepted.
  JobSpec read;
  MOE_RETURN_IF_ERROR(SchemaOf<JobSpec>().Read(doc, "", &read));
  moe::v1::TrainingJob job;
  Status st = MessageFromNode(doc, &job);
  if (!st.ok()) {
    return InvalidArgumentError("the job document does not match moe.v1.TrainingJob: " +
                                st.message());
  }
  return job;
}

StatusOr<moe::v1::TrainingJob> CheckedTrainingJob(const std::string& text) {
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(text, kJobDocumentLimits));
  if (!doc.IsMap()) {
    return InvalidArgumentError(
        "the job document must be a mapping (apiVersion, kind, metadata, spec)");
  }
  MOE_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(doc));
  return SpecToProto(spec);
}

}  // namespace moe
