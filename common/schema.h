// A struct described once, as a table of fields: the document's key, the member, its checks.
//
//   template <> const Schema<MoeConfig>& SchemaOf<MoeConfig>() {
//     static const auto* s = new Schema<MoeConfig>("MoeConfig", {
//         Field("num_experts", &MoeConfig::num_experts, Positive()),
//         Field("score_function", &MoeConfig::score_function, OneOf({"sigmoid", "softmax"})),
//     });
//     return *s;
//   }
//
// The reader (YAML/JSON document -> struct: absent fields keep the struct's defaults, unknown keys
// are errors with a "did you mean"), the writer (struct -> document, every field written out) and
// the per-field validator all walk that table, and so does the comparison with the protobuf form
// (tests/common/job_spec_schema_test.cc). Errors name the field by its path ("spec.model.moe.top_k:
// ...").
//
// Member types: int64_t, uint64_t, double, bool, std::string, std::vector<T> of any of these (lists
// of lists and lists of structs too), std::optional<T> (absent stays absent and is not written),
// and any struct that has a SchemaOf<> specialisation (declared before use, e.g. in
// common/job_spec_schema.h).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe {

// ---------------------------------------------------------------------------------------------------
// The description as data: what the protobuf comparison, the docs and the tests read.
struct SchemaInfo;

struct TypeInfo {
  enum class Kind { kInt64, kUint64, kDouble, kBool, kString, kList, kStruct, kMap };
  Kind kind;
  const TypeInfo* element =
      nullptr;  // kList: the element's type; kMap: the value's (keys are strings)
  const SchemaInfo* fields = nullptr;  // kStruct: its fields
};
std::string_view TypeKindName(TypeInfo::Kind kind);

struct FieldInfo {
  std::string name;  // the key in the document
  const TypeInfo* type = nullptr;
  bool optional = false;      // std::optional: no default; absent stays absent
  bool empty_default = true;  // false for a list whose default has elements
};

struct SchemaInfo {
  std::string name;  // the struct (or document section) it describes, for messages
  std::vector<FieldInfo> fields;
  const FieldInfo* Find(std::string_view name) const;
};

// ---------------------------------------------------------------------------------------------------
// Helpers the templates share (common/schema.cc).
namespace schema_internal {
std::string JoinPath(std::string_view parent, std::string_view key);
std::string IndexPath(std::string_view parent, size_t index);
// A mapping, or null (read as an empty mapping); anything else is an error naming `path`.
Status ExpectMapping(const Node& node, std::string_view path);
// The first key of `node` that `schema` does not describe, as an error with a suggestion.
Status RejectUnknownKeys(const Node& node, std::string_view path, const SchemaInfo& schema);
std::string FormatValue(int64_t v);
std::string FormatValue(uint64_t v);
std::string FormatValue(double v);
std::string FormatValue(const std::string& v);
template <typename T>
std::string FormatValue(T v) requires std::is_integral_v<T> {
  return FormatValue(static_cast<int64_t>(v));
}
Status Refuse(std::string_view path, std::string_view what);  // "<path>: <what>"
}  // namespace schema_internal

template <typename S>
class Schema;

// The description of a struct: specialised once per described struct.
template <typename S>
const Schema<S>& SchemaOf();

// ---------------------------------------------------------------------------------------------------
// Codec<T>: how one member type is read, written, checked (nested fields) and described.
template <typename T>
struct Codec {  // described structs
  static_assert(std::is_class_v<T>,
                "no codec for this member type: use int64_t, uint64_t, double, bool, "
                "std::string, std::vector, std::optional or a struct with a SchemaOf<>");
  static const TypeInfo& Type() { return SchemaOf<T>().type(); }
  static Status Read(const Node& n, const std::string& path, T* out) {
    return SchemaOf<T>().Read(n, path, out);
  }
  static Node Write(const T& v) { return SchemaOf<T>().Write(v); }
  static Status Check(const T& v, const std::string& path) { return SchemaOf<T>().Check(v, path); }
};

#define MOE_SCALAR_CODEC(T, KIND)                                            \
  template <>                                                                \
  struct Codec<T> {                                                          \
    static const TypeInfo& Type() {                                          \
      static const TypeInfo type{TypeInfo::Kind::KIND};                      \
      return type;                                                           \
    }                                                                        \
    static Status Read(const Node& n, const std::string& path, T* out);      \
    static Node Write(const T& v);                                           \
    static Status Check(const T&, const std::string&) { return OkStatus(); } \
  }
MOE_SCALAR_CODEC(int64_t, kInt64);
MOE_SCALAR_CODEC(uint64_t, kUint64);
MOE_SCALAR_CODEC(double, kDouble);
MOE_SCALAR_CODEC(bool, kBool);
MOE_SCALAR_CODEC(std::string, kString);
#undef MOE_SCALAR_CODEC

template <typename T>
struct Codec<std::vector<T>> {
  static const TypeInfo& Type() {
    static const TypeInfo type{TypeInfo::Kind::kList, &Codec<T>::Type(), nullptr};
    return type;
  }
  // A list replaces the default as a whole. Elements start from T's default (a null struct element
  // reads as the struct's default; a null scalar is a type error).
  static Status Read(const Node& n, const std::string& path, std::vector<T>* out) {
    if (!n.IsList()) {
      return schema_internal::Refuse(path, "expected a list, got " + std::string(n.KindName()));
    }
    std::vector<T> values(n.elements().size());
    for (size_t i = 0; i < values.size(); ++i) {
      MOE_RETURN_IF_ERROR(
          Codec<T>::Read(n.elements()[i], schema_internal::IndexPath(path, i), &values[i]));
    }
    *out = std::move(values);
    return OkStatus();
  }
  static Node Write(const std::vector<T>& v) {
    Node list = Node::List();
    for (const T& e : v) list.Append(Codec<T>::Write(e));
    return list;
  }
  static Status Check(const std::vector<T>& v, const std::string& path) {
    for (size_t i = 0; i < v.size(); ++i) {
      MOE_RETURN_IF_ERROR(Codec<T>::Check(v[i], schema_internal::IndexPath(path, i)));
    }
    return OkStatus();
  }
};

// A mapping of string keys (Kubernetes-style labels): read as a whole, keys in sorted order.
template <typename T>
struct Codec<std::map<std::string, T>> {
  static const TypeInfo& Type() {
    static const TypeInfo type{TypeInfo::Kind::kMap, &Codec<T>::Type(), nullptr};
    return type;
  }
  static Status Read(const Node& n, const std::string& path, std::map<std::string, T>* out) {
    MOE_RETURN_IF_ERROR(schema_internal::ExpectMapping(n, path));
    std::map<std::string, T> values;
    for (const auto& [key, value] : n.items()) {
      MOE_RETURN_IF_ERROR(
          Codec<T>::Read(value, schema_internal::JoinPath(path, key), &values[key]));
    }
    *out = std::move(values);
    return OkStatus();
  }
  static Node Write(const std::map<std::string, T>& v) {
    Node map = Node::Map();
    for (const auto& [key, value] : v) map.Set(key, Codec<T>::Write(value));
    return map;
  }
  static Status Check(const std::map<std::string, T>& v, const std::string& path) {
    for (const auto& [key, value] : v)
      MOE_RETURN_IF_ERROR(Codec<T>::Check(value, schema_internal::JoinPath(path, key)));
    return OkStatus();
  }
};

template <typename T>
struct Codec<std::optional<T>> {
  static const TypeInfo& Type() { return Codec<T>::Type(); }
  // Fields present in the document fill in the default of T.
  static Status Read(const Node& n, const std::string& path, std::optional<T>* out) {
    T value = out->value_or(T{});
    MOE_RETURN_IF_ERROR(Codec<T>::Read(n, path, &value));
    *out = std::move(value);
    return OkStatus();
  }
  static Node Write(const std::optional<T>& v) {
    return v.has_value() ? Codec<T>::Write(*v) : Node();
  }
  static Status Check(const std::optional<T>& v, const std::string& path) {
    return v.has_value() ? Codec<T>::Check(*v, path) : OkStatus();
  }
};

// ---------------------------------------------------------------------------------------------------
// Per-field checks: callables (value, path) -> Status. Any function of that shape works too.
struct Positive {
  template <typename T>
  Status operator()(const T& v, const std::string& path) const {
    if (v > 0) return OkStatus();
    return schema_internal::Refuse(path, "must be > 0, got " + schema_internal::FormatValue(v));
  }
};

struct NonNegative {
  template <typename T>
  Status operator()(const T& v, const std::string& path) const {
    if (v >= 0) return OkStatus();
    return schema_internal::Refuse(path, "must be >= 0, got " + schema_internal::FormatValue(v));
  }
};

template <typename B>
struct AtLeast {
  explicit AtLeast(B min) : min(min) {}
  template <typename T>
  Status operator()(const T& v, const std::string& path) const {
    if (v >= min) return OkStatus();
    return schema_internal::Refuse(path, "must be >= " + schema_internal::FormatValue(min) +
                                             ", got " + schema_internal::FormatValue(v));
  }
  B min;
};

// lo <= v < hi.
struct InRange {
  InRange(double lo, double hi) : lo(lo), hi(hi) {}
  Status operator()(double v, const std::string& path) const;
  double lo, hi;
};

// One of a fixed set of strings: "must be rack, node or any, got 'planet'".
struct OneOf {
  OneOf(std::initializer_list<std::string> allowed) : allowed(allowed) {}
  Status operator()(const std::string& v, const std::string& path) const;
  std::vector<std::string> allowed;
};

// A string that must be given: "metadata.name: missing".
struct NotEmpty {
  Status operator()(const std::string& v, const std::string& path) const;
};

// Applies `check` to every element of a list, naming "path[i]".
template <typename C>
struct Each {
  explicit Each(C check) : check(std::move(check)) {}
  template <typename T>
  Status operator()(const std::vector<T>& v, const std::string& path) const {
    for (size_t i = 0; i < v.size(); ++i) {
      MOE_RETURN_IF_ERROR(check(v[i], schema_internal::IndexPath(path, i)));
    }
    return OkStatus();
  }
  C check;
};

// ---------------------------------------------------------------------------------------------------
// One field of a struct S: built by Field() or Section() below.
template <typename S>
struct FieldDesc {
  // Called only for a key that is present and not null.
  using ReadFn = std::function<Status(const Node& value, const std::string& path, S* s)>;
  // Empty for an absent optional.
  using WriteFn = std::function<std::optional<Node>(const S& s)>;
  using CheckFn = std::function<Status(const S& s, const std::string& path)>;

  // An absent (or null) key is an error: "<path>: missing (<why>)".
  FieldDesc Required(std::string why) && {
    required_why = std::move(why);
    return std::move(*this);
  }
  // Runs after the field was read (e.g. a preset that fills in the other fields); its error is
  // prefixed with the field's path.
  FieldDesc AfterRead(std::function<Status(S*)> fn) && {
    after_read = std::move(fn);
    return std::move(*this);
  }

  FieldInfo info;
  ReadFn read;
  WriteFn write;
  CheckFn check;
  std::function<Status(S*)> after_read;
  std::string required_why;  // empty: the key may be left out
};

namespace schema_internal {
template <typename T>
const T* Present(const T& v) {
  return &v;
}
template <typename T>
const T* Present(const std::optional<T>& v) {
  return v.has_value() ? &*v : nullptr;
}
template <typename T>
constexpr bool kIsOptional = false;
template <typename T>
constexpr bool kIsOptional<std::optional<T>> = true;
template <typename T>
bool IsEmptyDefault(const T&) {
  return true;
}
template <typename T>
bool IsEmptyDefault(const std::vector<T>& v) {
  return v.empty();
}
template <typename T>
bool IsEmptyDefault(const std::map<std::string, T>& v) {
  return v.empty();
}
}  // namespace schema_internal

// A member of S, its document key and its checks (run in order on the value; skipped while an
// optional is absent), e.g. Field("top_k", &MoeConfig::top_k, Positive()).
template <typename S, typename T, typename... Checks>
FieldDesc<S> Field(std::string name, T S::*member, Checks... checks) {
  FieldDesc<S> f;
  f.info = FieldInfo{std::move(name), &Codec<T>::Type(), schema_internal::kIsOptional<T>,
                     schema_internal::IsEmptyDefault(S{}.*member)};
  f.read = [member](const Node& n, const std::string& path, S* s) {
    return Codec<T>::Read(n, path, &(s->*member));
  };
  f.write = [member](const S& s) -> std::optional<Node> {
    if constexpr (schema_internal::kIsOptional<T>) {
      if (!(s.*member).has_value()) return std::nullopt;
    }
    return Codec<T>::Write(s.*member);
  };
  f.check = [member, checks...](const S& s, const std::string& path) -> Status {
    if (const auto* v = schema_internal::Present(s.*member); v != nullptr) {
      Status st;
      ((st = st.ok() ? checks(*v, path) : st), ...);
      MOE_RETURN_IF_ERROR(st);
    }
    return Codec<T>::Check(s.*member, path);
  };
  return f;
}

// A mapping in the document whose fields live in S itself (e.g. a job's `metadata: {name,
// priority}` are members of JobSpec): Section<JobSpec>("metadata", {Field("name", &JobSpec::name),
// ...}).
template <typename S>
FieldDesc<S> Section(std::string name, std::vector<FieldDesc<S>> fields) {
  auto section = std::make_shared<const Schema<S>>(name, std::move(fields));
  FieldDesc<S> f;
  f.info = FieldInfo{std::move(name), &section->type(), false, true};
  f.read = [section](const Node& n, const std::string& path, S* s) {
    return section->Read(n, path, s);
  };
  f.write = [section](const S& s) -> std::optional<Node> { return section->Write(s); };
  f.check = [section](const S& s, const std::string& path) { return section->Check(s, path); };
  return f;
}

// ---------------------------------------------------------------------------------------------------
template <typename S>
class Schema {
 public:
  Schema(std::string name, std::vector<FieldDesc<S>> fields) : fields_(std::move(fields)) {
    info_.name = std::move(name);
    std::set<std::string_view> keys;  // Write adds each key without a search: no key twice
    for (const auto& f : fields_) {
      MOE_CHECK(keys.insert(f.info.name).second)
          << info_.name << ": the field " << f.info.name << " is in the table twice";
      info_.fields.push_back(f.info);
    }
  }
  // The TypeInfo points into this object.
  Schema(const Schema&) = delete;
  Schema& operator=(const Schema&) = delete;

  // Reads the mapping `node` (null reads as empty) into *out, over what *out already holds.
  Status Read(const Node& node, const std::string& path, S* out) const {
    MOE_RETURN_IF_ERROR(schema_internal::ExpectMapping(node, path));
    for (const auto& f : fields_) {
      const Node* value = node.IsMap() ? node.Find(f.info.name) : nullptr;
      if (value == nullptr || value->IsNull()) {
        if (!f.required_why.empty()) {
          return schema_internal::Refuse(schema_internal::JoinPath(path, f.info.name),
                                         "missing (" + f.required_why + ")");
        }
        continue;  // no path built for an absent key (most of a job's are)
      }
      const std::string field_path = schema_internal::JoinPath(path, f.info.name);
      MOE_RETURN_IF_ERROR(f.read(*value, field_path, out));
      if (f.after_read) MOE_RETURN_IF_ERROR(f.after_read(out).WithPrefix(field_path));
    }
    return schema_internal::RejectUnknownKeys(node, path, info_);
  }

  // Every field, in the table's order (an absent optional is left out).
  Node Write(const S& s) const {
    Node n = Node::Map();
    n.Reserve(fields_.size());
    for (const auto& f : fields_) {  // each key once: added, not searched for
      if (std::optional<Node> v = f.write(s)) n.AddNew(f.info.name, std::move(*v));
    }
    return n;
  }

  // Every field's checks, in the table's order, nested structs included; the first failure.
  Status Check(const S& s, const std::string& path) const {
    for (const auto& f : fields_) {
      MOE_RETURN_IF_ERROR(f.check(s, schema_internal::JoinPath(path, f.info.name)));
    }
    return OkStatus();
  }

  const SchemaInfo& info() const { return info_; }
  const TypeInfo& type() const { return type_; }

 private:
  std::vector<FieldDesc<S>> fields_;
  SchemaInfo info_;
  TypeInfo type_{TypeInfo::Kind::kStruct, nullptr, &info_};
};

}  // namespace moe
