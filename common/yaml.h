// A YAML subset parser and a JSON/YAML writer over one document tree.
//
// Job files are YAML (docs/job-spec.md). The engine must build without Debian -dev packages, so
// yaml-cpp is not an option there; this parser covers what job files use: block mappings and
// sequences by indentation, flow collections ({a: 1, b: [x, y]}), plain, 'single' and "double"
// quoted scalars, comments, literal (|) and folded (>) block scalars, and a leading "---". JSON is
// valid input too. Not supported (rejected with an error naming the line): anchors, aliases, tags,
// multi-documents, complex keys, tabs in indentation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace moe {

class Node {
 public:
  enum class Kind { kNull, kScalar, kMap, kList };

  Node() = default;
  static Node Scalar(std::string value, bool quoted = false);
  static Node Map() {
    Node n;
    n.kind_ = Kind::kMap;
    return n;
  }
  static Node List() {
    Node n;
    n.kind_ = Kind::kList;
    return n;
  }

  Kind kind() const { return kind_; }
  bool IsNull() const { return kind_ == Kind::kNull; }
  bool IsScalar() const { return kind_ == Kind::kScalar; }
  bool IsMap() const { return kind_ == Kind::kMap; }
  bool IsList() const { return kind_ == Kind::kList; }
  std::string_view KindName() const;

  // Scalars.
  const std::string& scalar() const { return scalar_; }
  bool quoted() const { return quoted_; }
  // Typed reads; the error names `path`, e.g. "spec.model.top_k: expected an integer, got 'x'".
  StatusOr<int64_t> AsInt(std::string_view path) const;
  StatusOr<double> AsDouble(std::string_view path) const;
  StatusOr<bool> AsBool(std::string_view path) const;
  StatusOr<std::string> AsString(std::string_view path) const;

  // Maps keep their insertion order.
  const std::vector<std::pair<std::string, Node>>& items() const { return items_; }
  const Node* Find(std::string_view key) const;
  Node* FindMutable(std::string_view key);
  // Adds or replaces `key`.
  Node& Set(std::string key, Node value);
  // Adds a key the caller knows is new (the parsers, which track their keys in a set: Set's search
  // made a mapping of n keys cost n^2, 20,000 labels 9 s).
  Node& AddNew(std::string key, Node value);
  // Room for `n` keys or elements (a writer that knows how many it adds).
  void Reserve(size_t n) { kind_ == Kind::kList ? elements_.reserve(n) : items_.reserve(n); }

  // Lists.
  const std::vector<Node>& elements() const { return elements_; }
  void Append(Node value) { elements_.push_back(std::move(value)); }

  // Where the node started in its source text (1-based; 0 when built in code).
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  Kind kind_ = Kind::kNull;
  std::string scalar_;
  bool quoted_ = false;
  std::vector<std::pair<std::string, Node>> items_;
  std::vector<Node> elements_;
  int line_ = 0;
};

// What a parse accepts. Collections nest at most max_depth levels (deeper input would exhaust the
// stack of this recursive parser, and of everything that walks the tree); max_bytes bounds the text
// (0: unbounded, for files we wrote ourselves, such as a checkpoint manifest).
struct YamlLimits {
  size_t max_bytes = 0;
  int max_depth = 64;
  const char* what = "a document";  // named in the size error
};
// A job document, as moectl, moe-train and the controller read it: 1 MiB, 64 levels
// (docs/job-spec.md).
inline constexpr YamlLimits kJobDocumentLimits{size_t{1} << 20, 64, "a job document"};

// Parses one YAML (or JSON) document. Errors are INVALID_ARGUMENT with "line N: ...".
StatusOr<Node> ParseYaml(std::string_view text, const YamlLimits& limits = {});

// Writes JSON. Plain scalars that read as numbers, booleans or null are written bare; everything
// else as strings. indent < 0 gives one line.
std::string ToJson(const Node& node, int indent = -1);
// Writes block-style YAML.
std::string ToYaml(const Node& node);
// JSON string literal with escapes, quotes included.
std::string JsonQuote(std::string_view s);
// The shortest decimal that reads back as the same value ("0.1", not "0.10000000000000001"), with a
// mantissa that has a point when there is an exponent ("3.0e-04", not "3e-04": YAML 1.1 readers
// such as PyYAML take the latter for a string); "" when not finite.
std::string ShortestRoundTrip(double v);
std::string ShortestRoundTrip(float v);

}  // namespace moe
