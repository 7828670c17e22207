#include "cli/object_form.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "common/job_spec_proto.h"
#include "moe/v1/options.pb.h"

namespace moe::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Seconds since the epoch by name: created_at, updated_at, registered_at, checkpoint_time, time,
// last_heartbeat.
bool IsTimeField(const FieldDescriptor& f) {
  const std::string& n = f.name();
  return f.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE &&
         (n == "time" || n == "last_heartbeat" || n.ends_with("_at") || n.ends_with("_time"));
}

Node Number(const std::string& s) { return s.empty() ? Node() : Node::Scalar(s); }

Node DoubleNode(const FieldDescriptor& f, double v) {
  if (!IsTimeField(f)) return Number(ShortestRoundTrip(v));
  // 0: never happened; past the year 9999 (a report's garbage): no time either.
  return v > 0 && v < 253402300800.0 ? Node::Scalar(Rfc3339(v), /*quoted=*/true) : Node();
}

Node ValueNode(const Message& m, const FieldDescriptor& f, int i) {
  const auto* r = m.GetReflection();
  const bool one = i < 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return Number(std::to_string(one ? r->GetInt32(m, &f) : r->GetRepeatedInt32(m, &f, i)));
    case FieldDescriptor::CPPTYPE_INT64:
      return Number(std::to_string(one ? r->GetInt64(m, &f) : r->GetRepeatedInt64(m, &f, i)));
    case FieldDescriptor::CPPTYPE_UINT32:
      return Number(std::to_string(one ? r->GetUInt32(m, &f) : r->GetRepeatedUInt32(m, &f, i)));
    case FieldDescriptor::CPPTYPE_UINT64:
      return Number(std::to_string(one ? r->GetUInt64(m, &f) : r->GetRepeatedUInt64(m, &f, i)));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return DoubleNode(f, one ? r->GetDouble(m, &f) : r->GetRepeatedDouble(m, &f, i));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Number(ShortestRoundTrip(one ? r->GetFloat(m, &f) : r->GetRepeatedFloat(m, &f, i)));
    case FieldDescriptor::CPPTYPE_BOOL:
      return Node::Scalar((one ? r->GetBool(m, &f) : r->GetRepeatedBool(m, &f, i)) ? "true"
                                                                                   : "false");
    case FieldDescriptor::CPPTYPE_ENUM:
      return Node::Scalar((one ? r->GetEnum(m, &f) : r->GetRepeatedEnum(m, &f, i))->name(), true);
    case FieldDescriptor::CPPTYPE_STRING:
      return Node::Scalar(one ? r->GetString(m, &f) : r->GetRepeatedString(m, &f, i), true);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ObjectNode(one ? r->GetMessage(m, &f) : r->GetRepeatedMessage(m, &f, i));
  }
  return Node();
}

// A map field as a mapping sorted by key (reflection's order is unspecified).
Node MapNode(const Message& m, const FieldDescriptor& f) {
  std::map<std::string, Node> entries;
  const int n = m.GetReflection()->FieldSize(m, &f);
  for (int i = 0; i < n; ++i) {
    const Message& entry = m.GetReflection()->GetRepeatedMessage(m, &f, i);
    const FieldDescriptor* key = entry.GetDescriptor()->map_key();
    const Node k = ValueNode(entry, *key, -1);
    entries[k.scalar()] = ValueNode(entry, *entry.GetDescriptor()->map_value(), -1);
  }
  Node out = Node::Map();
  for (auto& [k, v] : entries) out.Set(k, std::move(v));
  return out;
}

}  // namespace

std::string Rfc3339(double t) {
  if (!(t >= 0 && t < 253402300800.0)) return "";  // years 1970-9999
  double whole = 0;
  const double frac = std::modf(t, &whole);
  const std::time_t s = static_cast<std::time_t>(whole);
  std::tm tm{};
  if (gmtime_r(&s, &tm) == nullptr) return "";
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  const int ms = std::min(999, static_cast<int>(frac * 1000));
  std::snprintf(out, sizeof(out), "%s.%03dZ", date, std::max(0, ms));
  return out;
}

Node ObjectNode(const Message& m) {
  Node node = Node::Map();
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->options().GetExtension(moe::v1::internal)) continue;  // the controller's bookkeeping
    // An enum left at its zero, *_UNSPECIFIED, was never set (Job.stop_state of a job never told to
    // stop): left out as an unset field is, not printed as a value.
    if (!f->is_repeated() && f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM &&
        r->GetEnumValue(m, f) == 0 &&
        f->enum_type()->FindValueByNumber(0)->name().ends_with("_UNSPECIFIED"))
      continue;
    if (f->is_map()) {
      node.Set(DocumentKey(*f), MapNode(m, *f));
    } else if (f->is_repeated()) {
      Node list = Node::List();
      for (int i = 0; i < r->FieldSize(m, f); ++i) list.Append(ValueNode(m, *f, i));
      node.Set(DocumentKey(*f), std::move(list));
    } else if (!f->has_presence() || r->HasField(m, f)) {
      node.Set(DocumentKey(*f), ValueNode(m, *f, -1));
    }
  }
  return node;
}

}  // namespace moe::cli
