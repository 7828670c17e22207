#include "common/schema.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace moe {
namespace schema_internal {
namespace {

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// "(did you mean 'top_k'?)" when a known name is within two edits, else "(known: a, b, c)".
std::string Suggestion(std::string_view key, const SchemaInfo& schema) {
  std::vector<std::string> known;
  for (const auto& f : schema.fields) known.push_back(f.name);
  std::sort(known.begin(), known.end());
  std::string best;
  size_t best_distance = 3;
  for (const auto& candidate : known) {
    const size_t d = EditDistance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (!best.empty()) return "(did you mean '" + best + "'?)";
  std::string list;
  for (const auto& candidate : known) list += (list.empty() ? "" : ", ") + candidate;
  return "(known: " + list + ")";
}

}  // namespace

std::string JoinPath(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

std::string IndexPath(std::string_view parent, size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

Status Refuse(std::string_view path, std::string_view what) {
  return InvalidArgumentError(std::string(path) + ": " + std::string(what));
}

Status ExpectMapping(const Node& node, std::string_view path) {
  if (node.IsNull() || node.IsMap()) return OkStatus();
  return Refuse(path.empty() ? "document" : path,
                "expected a mapping, got " + std::string(node.KindName()));
}

Status RejectUnknownKeys(const Node& node, std::string_view path, const SchemaInfo& schema) {
  if (!node.IsMap()) return OkStatus();
  for (const auto& [key, value] : node.items()) {
    if (schema.Find(key) == nullptr) {
      return Refuse(JoinPath(path, key), "unknown field " + Suggestion(key, schema));
    }
  }
  return OkStatus();
}

std::string FormatValue(int64_t v) { return std::to_string(v); }
std::string FormatValue(uint64_t v) { return std::to_string(v); }
std::string FormatValue(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string FormatValue(const std::string& v) { return "'" + v + "'"; }

}  // namespace schema_internal

using schema_internal::Refuse;

std::string_view TypeKindName(TypeInfo::Kind kind) {
  // In the order of TypeInfo::Kind.
  static constexpr std::string_view kNames[] = {"int64",  "uint64", "double", "bool",
                                                "string", "list",   "struct", "map"};
  return kNames[static_cast<int>(kind)];
}

const FieldInfo* SchemaInfo::Find(std::string_view name) const {
  for (const auto& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// Scalars. Strings are written quoted, so that "1" stays a string in JSON.

Status Codec<int64_t>::Read(const Node& n, const std::string& path, int64_t* out) {
  MOE_ASSIGN_OR_RETURN(*out, n.AsInt(path));
  return OkStatus();
}
Node Codec<int64_t>::Write(const int64_t& v) { return Node::Scalar(std::to_string(v)); }

Status Codec<uint64_t>::Read(const Node& n, const std::string& path, uint64_t* out) {
  auto v = n.AsInt(path);
  if (v.ok()) {
    if (*v < 0) return Refuse(path, "must be >= 0, got " + std::to_string(*v));
    *out = static_cast<uint64_t>(*v);
    return OkStatus();
  }
  // Above int64's range: the decimal digits of a uint64.
  const std::string& s = n.scalar();
  char* end = nullptr;
  errno = 0;
  const unsigned long long u = std::strtoull(s.c_str(), &end, 10);
  if (!n.IsScalar() || s.empty() || s[0] == '-' || end != s.c_str() + s.size() || errno == ERANGE) {
    return v.status();
  }
  *out = u;
  return OkStatus();
}
Node Codec<uint64_t>::Write(const uint64_t& v) { return Node::Scalar(std::to_string(v)); }

Status Codec<double>::Read(const Node& n, const std::string& path, double* out) {
  MOE_ASSIGN_OR_RETURN(*out, n.AsDouble(path));
  return OkStatus();
}
Node Codec<double>::Write(const double& v) {
  // The shortest decimal that reads back as the same double ("0.1", not "0.10000000000000001");
  // not finite: as before, "inf" or "nan" (the readers refuse them with the field's name).
  const std::string s = ShortestRoundTrip(v);
  return Node::Scalar(!s.empty() ? s : std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

Status Codec<bool>::Read(const Node& n, const std::string& path, bool* out) {
  MOE_ASSIGN_OR_RETURN(*out, n.AsBool(path));
  return OkStatus();
}
Node Codec<bool>::Write(const bool& v) { return Node::Scalar(v ? "true" : "false"); }

Status Codec<std::string>::Read(const Node& n, const std::string& path, std::string* out) {
  MOE_ASSIGN_OR_RETURN(*out, n.AsString(path));
  return OkStatus();
}
Node Codec<std::string>::Write(const std::string& v) { return Node::Scalar(v, /*quoted=*/true); }

// ---------------------------------------------------------------------------------------------------
// Checks that are not templates.

Status InRange::operator()(double v, const std::string& path) const {
  if (v >= lo && v < hi) return OkStatus();
  return Refuse(path, "must be in [" + schema_internal::FormatValue(lo) + ", " +
                          schema_internal::FormatValue(hi) + "), got " +
                          schema_internal::FormatValue(v));
}

Status OneOf::operator()(const std::string& v, const std::string& path) const {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return OkStatus();
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i];
  }
  return Refuse(path, "must be " + list + ", got '" + v + "'");
}

Status NotEmpty::operator()(const std::string& v, const std::string& path) const {
  return v.empty() ? Refuse(path, "missing") : OkStatus();
}

}  // namespace moe
