// What the generated reader of moe.v1.TrainingJob (job_spec_proto.gen.cc, by proto/gen_job_spec.py)
// uses: a field's path built only when an error names it (a submit reads every field, and the
// table's reader made a string of each path), and its errors worded as the table's reader words
// them (common/schema.h), so that both readers refuse a message the same way.
#pragma once

#include <cmath>
#include <string>
#include <string_view>

#include "common/status.h"

namespace moe::job_spec_proto_direct {

// A field's place in the document: its parent, its key (or its index in a list). Lives on the
// reader's stack; text only on demand.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;  // empty with index >= 0: an element of the parent's list
  int index = -1;

  std::string str() const {
    std::string up = parent != nullptr ? parent->str() : "";
    if (index >= 0) return up + "[" + std::to_string(index) + "]";
    return up.empty() ? std::string(key) : up + "." + std::string(key);
  }
};

inline Path Join(const Path& parent, std::string_view key) { return Path{&parent, key, -1}; }
inline Path Index(const Path& parent, int i) { return Path{&parent, {}, i}; }

// The table's reader refuses "nan" and "inf" with the field's path (Node::AsDouble).
inline Status Finite(double v, const Path& path) {
  if (std::isfinite(v)) return OkStatus();
  const char* text = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  return InvalidArgumentError(path.str() + ": expected a finite number, got '" + text + "'");
}

inline Status Missing(const Path& path, std::string_view why) {
  return InvalidArgumentError(path.str() + ": missing (" + std::string(why) + ")");
}

}  // namespace moe::job_spec_proto_direct
