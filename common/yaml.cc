#include "common/yaml.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <unordered_set>

namespace moe {
namespace {

Status LineError(int line, std::string_view what) {
  return InvalidArgumentError("line " + std::to_string(line) + ": " + std::string(what));
}

bool IsPlainNull(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}
bool IsPlainBool(std::string_view s) {
  return s == "true" || s == "false" || s == "True" || s == "False" || s == "TRUE" || s == "FALSE";
}
bool IsPlainNumber(std::string_view s) {
  if (s.empty()) return false;
  std::string str(s);
  char* end = nullptr;
  errno = 0;
  std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size()) return false;
  // strtod accepts "inf", "nan" and hex; JSON does not.
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' ||
          c == 'e' || c == 'E'))
      return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Flow parser: JSON-like collections and scalars inside one string.
Status TooDeep(int line, int limit) {
  return LineError(line, "nesting deeper than " + std::to_string(limit) +
                             " levels (the limit for a document; a job needs fewer than 10)");
}

class FlowParser {
 public:
  // depth: the collections already open around this text (the block lines above it).
  FlowParser(std::string_view text, int line, int depth, int max_depth)
      : s_(text), line_(line), depth_(depth), max_depth_(max_depth) {}

  StatusOr<Node> ParseAll() {
    MOE_ASSIGN_OR_RETURN(Node n, ParseValue(/*in_flow=*/false));
    SkipSpace();
    if (pos_ != s_.size())
      return LineError(line_, "unexpected '" + std::string(s_.substr(pos_)) + "'");
    return n;
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  StatusOr<Node> ParseValue(bool in_flow) {
    SkipSpace();
    if (pos_ >= s_.size()) {
      Node n;
      n.set_line(line_);
      return n;
    }
    char c = s_[pos_];
    if (c == '{') return ParseMap();
    if (c == '[') return ParseList();
    if (c == '"' || c == '\'') {
      MOE_ASSIGN_OR_RETURN(std::string str, ParseQuoted());
      Node n = Node::Scalar(std::move(str), true);
      n.set_line(line_);
      return n;
    }
    if (c == '&' || c == '*' || c == '!')
      return LineError(line_, "anchors, aliases and tags are not supported");
    // Plain scalar: up to a flow indicator (in flow context) or the end.
    size_t start = pos_;
    while (pos_ < s_.size()) {
      char d = s_[pos_];
      if (in_flow && (d == ',' || d == ']' || d == '}')) break;
      if (in_flow && d == ':' &&
          (pos_ + 1 == s_.size() || s_[pos_ + 1] == ' ' || s_[pos_ + 1] == ',' ||
           s_[pos_ + 1] == '}' || s_[pos_ + 1] == ']'))
        break;
      ++pos_;
    }
    std::string_view raw = s_.substr(start, pos_ - start);
    while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\t')) raw.remove_suffix(1);
    Node n;
    if (!IsPlainNull(raw)) n = Node::Scalar(std::string(raw));
    n.set_line(line_);
    return n;
  }

  StatusOr<std::string> ParseQuoted() {
    char q = s_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= s_.size())
        return LineError(line_, std::string("unterminated ") + (q == '"' ? "double" : "single") +
                                    "-quoted string");
      char c = s_[pos_++];
      if (q == '\'') {
        if (c == '\'') {
          if (pos_ < s_.size() && s_[pos_] == '\'') {
            out += '\'';
            ++pos_;
            continue;
          }
          break;
        }
        out += c;
        continue;
      }
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return LineError(line_, "dangling escape in string");
      char e = s_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '/':
          out += '/';
          break;
        case '\\':
          out += '\\';
          break;
        case '"':
          out += '"';
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return LineError(line_, "short \\u escape");
          unsigned cp = std::strtoul(std::string(s_.substr(pos_, 4)).c_str(), nullptr, 16);
          pos_ += 4;
          // Surrogate pair.
          if (cp >= 0xD800 && cp <= 0xDBFF && pos_ + 6 <= s_.size() && s_[pos_] == '\\' &&
              s_[pos_ + 1] == 'u') {
            unsigned lo = std::strtoul(std::string(s_.substr(pos_ + 2, 4)).c_str(), nullptr, 16);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              pos_ += 6;
            }
          }
          if (cp < 0x80)
            out += static_cast<char>(cp);
          else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          return LineError(line_, std::string("unknown escape \\") + e);
      }
    }
    return out;
  }

  // A flow collection one level deeper; the level is left when `body` returns.
  template <typename F>
  StatusOr<Node> Nested(F body) {
    if (++depth_ > max_depth_) return TooDeep(line_, max_depth_);
    StatusOr<Node> n = body();
    --depth_;
    return n;
  }

  StatusOr<Node> ParseMap() {
    return Nested([this] { return ParseMapBody(); });
  }
  StatusOr<Node> ParseList() {
    return Nested([this] { return ParseListBody(); });
  }

  StatusOr<Node> ParseMapBody() {
    Node map = Node::Map();
    std::unordered_set<std::string> seen;  // its keys: a duplicate is found in O(1)
    map.set_line(line_);
    ++pos_;  // {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return map;
    }
    while (true) {
      SkipSpace();
      std::string key;
      if (pos_ < s_.size() && (s_[pos_] == '"' || s_[pos_] == '\'')) {
        MOE_ASSIGN_OR_RETURN(key, ParseQuoted());
      } else {
        size_t start = pos_;
        while (pos_ < s_.size() && s_[pos_] != ':' && s_[pos_] != ',' && s_[pos_] != '}') ++pos_;
        key = std::string(s_.substr(start, pos_ - start));
        while (!key.empty() && key.back() == ' ') key.pop_back();
      }
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':')
        return LineError(line_, "expected ':' after key '" + key + "' in flow mapping");
      ++pos_;
      MOE_ASSIGN_OR_RETURN(Node value, ParseValue(true));
      if (!seen.insert(key).second) return LineError(line_, "duplicate key '" + key + "'");
      map.AddNew(key, std::move(value));
      SkipSpace();
      if (pos_ >= s_.size()) return LineError(line_, "unterminated flow mapping (missing '}')");
      if (s_[pos_] == ',') {
        ++pos_;
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return map;
        }
        continue;
      }
      if (s_[pos_] == '}') {
        ++pos_;
        return map;
      }
      return LineError(line_,
                       std::string("expected ',' or '}' in flow mapping, got '") + s_[pos_] + "'");
    }
  }

  StatusOr<Node> ParseListBody() {
    Node list = Node::List();
    list.set_line(line_);
    ++pos_;  // [
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return list;
    }
    while (true) {
      MOE_ASSIGN_OR_RETURN(Node value, ParseValue(true));
      list.Append(std::move(value));
      SkipSpace();
      if (pos_ >= s_.size()) return LineError(line_, "unterminated flow sequence (missing ']')");
      if (s_[pos_] == ',') {
        ++pos_;
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return list;
        }
        continue;
      }
      if (s_[pos_] == ']') {
        ++pos_;
        return list;
      }
      return LineError(line_,
                       std::string("expected ',' or ']' in flow sequence, got '") + s_[pos_] + "'");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_;
  int depth_, max_depth_;
};

// ---------------------------------------------------------------------------------------------------
// Block parser over lines.
struct Line {
  int number;        // 1-based
  int indent;        // columns of leading spaces
  std::string text;  // content without indentation and comment, right-trimmed
};

// Removes a trailing comment (a '#' at the start or after whitespace, outside quotes).
std::string StripComment(std::string_view s) {
  bool in_single = false, in_double = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_double) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_double = false;
    } else if (in_single) {
      if (c == '\'') in_single = false;
    } else if (c == '"' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '[' || s[i - 1] == '{' ||
                            s[i - 1] == ',' || s[i - 1] == ':')) {
      in_double = true;
    } else if (c == '\'' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '[' || s[i - 1] == '{' ||
                             s[i - 1] == ',' || s[i - 1] == ':')) {
      in_single = true;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return std::string(s.substr(0, i));
    }
  }
  return std::string(s);
}

std::string RightTrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// Finds the ':' that separates a block mapping key from its value: outside quotes and brackets,
// followed by a space or the end. Returns npos when the line is not a mapping entry.
size_t FindMappingColon(std::string_view s) {
  bool in_single = false, in_double = false;
  int depth = 0;
  if (!s.empty() && (s[0] == '{' || s[0] == '[')) return std::string_view::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_double) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_double = false;
      continue;
    }
    if (in_single) {
      if (c == '\'') in_single = false;
      continue;
    }
    if (c == '"' && i == 0) {
      in_double = true;
      continue;
    }
    if (c == '\'' && i == 0) {
      in_single = true;
      continue;
    }
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ':' && depth == 0 && (i + 1 == s.size() || s[i + 1] == ' ')) return i;
  }
  return std::string_view::npos;
}

class BlockParser {
 public:
  BlockParser(std::vector<Line> lines, int max_depth)
      : lines_(std::move(lines)), max_depth_(max_depth) {}

  StatusOr<Node> ParseDocument() {
    if (lines_.empty()) return Node();
    MOE_ASSIGN_OR_RETURN(Node n, ParseBlock(lines_[0].indent));
    if (pos_ < lines_.size()) {
      return LineError(lines_[pos_].number,
                       "unexpected indentation or content '" + lines_[pos_].text + "'");
    }
    return n;
  }

 private:
  bool IsSeqItem(const Line& l) const {
    return l.text == "-" || (l.text.size() >= 2 && l.text[0] == '-' && l.text[1] == ' ');
  }

  StatusOr<Node> ParseBlock(int indent) {
    if (++depth_ > max_depth_) return TooDeep(lines_[pos_].number, max_depth_);
    StatusOr<Node> n = ParseBlockAt(indent);
    --depth_;
    return n;
  }

  StatusOr<Node> ParseBlockAt(int indent) {
    const Line& first = lines_[pos_];
    if (IsSeqItem(first)) return ParseSequence(indent);
    if (FindMappingColon(first.text) != std::string_view::npos) return ParseMapping(indent);
    // A lone scalar or flow collection, possibly continued on more-indented lines.
    std::string text = first.text;
    int number = first.number;
    ++pos_;
    while (pos_ < lines_.size() && lines_[pos_].indent > indent - 1 && NeedsMore(text)) {
      text += " " + lines_[pos_].text;
      ++pos_;
    }
    return ParseInline(text, number);
  }

  // True while a flow collection's brackets are unbalanced.
  static bool NeedsMore(std::string_view text) {
    int depth = 0;
    bool in_single = false, in_double = false;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      if (in_double) {
        if (c == '\\')
          ++i;
        else if (c == '"')
          in_double = false;
        continue;
      }
      if (in_single) {
        if (c == '\'') in_single = false;
        continue;
      }
      if (c == '"')
        in_double = true;
      else if (c == '\'')
        in_single = true;
      else if (c == '[' || c == '{')
        ++depth;
      else if (c == ']' || c == '}')
        --depth;
    }
    return depth > 0;
  }

  StatusOr<Node> ParseInline(const std::string& text, int number) {
    FlowParser fp(text, number, depth_, max_depth_);
    return fp.ParseAll();
  }

  StatusOr<Node> ParseSequence(int indent) {
    Node list = Node::List();
    list.set_line(lines_[pos_].number);
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && IsSeqItem(lines_[pos_])) {
      Line& l = lines_[pos_];
      if (l.text == "-") {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          MOE_ASSIGN_OR_RETURN(Node item, ParseBlock(lines_[pos_].indent));
          list.Append(std::move(item));
        } else {
          list.Append(Node());
        }
        continue;
      }
      // "- rest": treat rest as a line of its own at the column where it starts.
      size_t skip = 1;
      while (skip < l.text.size() && l.text[skip] == ' ') ++skip;
      l.indent += static_cast<int>(skip);
      l.text = l.text.substr(skip);
      MOE_ASSIGN_OR_RETURN(Node item, ParseBlock(l.indent));
      list.Append(std::move(item));
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      return LineError(lines_[pos_].number, "bad indentation in sequence");
    }
    return list;
  }

  StatusOr<Node> ParseMapping(int indent) {
    Node map = Node::Map();
    std::unordered_set<std::string> seen;  // its keys: a duplicate is found in O(1)
    map.set_line(lines_[pos_].number);
    while (pos_ < lines_.size() && lines_[pos_].indent == indent) {
      const Line l = lines_[pos_];
      if (IsSeqItem(l))
        return LineError(l.number, "a sequence item where a mapping key was expected");
      size_t colon = FindMappingColon(l.text);
      if (colon == std::string_view::npos) {
        return LineError(l.number, "expected 'key: value', got '" + l.text + "'");
      }
      std::string key = RightTrim(l.text.substr(0, colon));
      if (!key.empty() && (key[0] == '"' || key[0] == '\'')) {
        FlowParser fp(key, l.number, depth_, max_depth_);
        MOE_ASSIGN_OR_RETURN(Node k, fp.ParseAll());
        key = k.scalar();
      }
      if (key.empty()) return LineError(l.number, "empty mapping key");
      if (key[0] == '?') return LineError(l.number, "complex keys are not supported");
      if (!seen.insert(key).second) return LineError(l.number, "duplicate key '" + key + "'");
      std::string rest = l.text.substr(colon + 1);
      size_t start = rest.find_first_not_of(' ');
      rest = start == std::string::npos ? "" : rest.substr(start);
      ++pos_;
      Node value;
      if (rest.empty()) {
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          MOE_ASSIGN_OR_RETURN(value, ParseBlock(lines_[pos_].indent));
        } else if (pos_ < lines_.size() && lines_[pos_].indent == indent &&
                   IsSeqItem(lines_[pos_])) {
          // YAML allows a sequence at the same indentation as its parent key.
          MOE_ASSIGN_OR_RETURN(value, ParseSequence(indent));
        } else {
          value.set_line(l.number);
        }
      } else if (rest == "|" || rest == ">" || rest == "|-" || rest == ">-") {
        value = ParseBlockScalar(indent, rest[0] == '|', rest.size() == 2, l.number);
      } else {
        std::string text = rest;
        while (pos_ < lines_.size() && lines_[pos_].indent > indent && NeedsMore(text)) {
          text += " " + lines_[pos_].text;
          ++pos_;
        }
        MOE_ASSIGN_OR_RETURN(value, ParseInline(text, l.number));
      }
      map.AddNew(key, std::move(value));
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      return LineError(lines_[pos_].number, "bad indentation (more than the mapping's " +
                                                std::to_string(indent) + " spaces)");
    }
    return map;
  }

  Node ParseBlockScalar(int indent, bool literal, bool strip, int number) {
    // Comments were stripped from every line; block scalars rarely carry '#'. Good enough for job
    // files.
    std::string out;
    int block_indent = -1;
    while (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      const Line& l = lines_[pos_];
      if (block_indent < 0) block_indent = l.indent;
      std::string text =
          std::string(static_cast<size_t>(std::max(0, l.indent - block_indent)), ' ') + l.text;
      if (!out.empty()) out += literal ? "\n" : " ";
      out += text;
      ++pos_;
    }
    if (!strip && !out.empty()) out += "\n";
    Node n = Node::Scalar(out, true);
    n.set_line(number);
    return n;
  }

  std::vector<Line> lines_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
};

void WriteJson(const Node& n, int indent, int depth, std::string* out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  switch (n.kind()) {
    case Node::Kind::kNull:
      *out += "null";
      return;
    case Node::Kind::kScalar:
      if (!n.quoted() && (IsPlainBool(n.scalar()) || IsPlainNumber(n.scalar()))) {
        std::string s = n.scalar();
        if (IsPlainBool(s))
          for (auto& c : s) c = static_cast<char>(std::tolower(c));
        // JSON numbers cannot start with '+' or '.', nor end with '.'.
        if (!s.empty() && s[0] == '+') s = s.substr(1);
        if (!s.empty() && s[0] == '.') s = "0" + s;
        if (s.size() > 1 && s[0] == '-' && s[1] == '.') s = "-0" + s.substr(1);
        if (!s.empty() && s.back() == '.') s += "0";
        *out += s;
      } else {
        *out += JsonQuote(n.scalar());
      }
      return;
    case Node::Kind::kMap: {
      if (n.items().empty()) {
        *out += "{}";
        return;
      }
      *out += '{';
      bool first = true;
      for (const auto& [k, v] : n.items()) {
        if (!first) *out += ',';
        first = false;
        newline(depth + 1);
        *out += JsonQuote(k);
        *out += indent < 0 ? ":" : ": ";
        WriteJson(v, indent, depth + 1, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
    case Node::Kind::kList: {
      if (n.elements().empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      bool first = true;
      for (const auto& v : n.elements()) {
        if (!first) *out += ',';
        first = false;
        newline(depth + 1);
        WriteJson(v, indent, depth + 1, out);
      }
      newline(depth);
      *out += ']';
      return;
    }
  }
}

bool NeedsYamlQuotes(const std::string& s) {
  if (s.empty()) return true;
  if (IsPlainNull(s) || IsPlainBool(s)) return true;
  if (s.find_first_of(":#{}[],&*!|>'\"%@`\n") != std::string::npos) return true;
  if (s[0] == '-' || s[0] == ' ' || s.back() == ' ' || s[0] == '?') return !IsPlainNumber(s);
  return false;
}

void WriteYamlScalar(const Node& n, std::string* out) {
  if (n.IsNull()) {
    *out += "null";
    return;
  }
  if (n.quoted() && (IsPlainNumber(n.scalar()) || NeedsYamlQuotes(n.scalar()))) {
    *out += JsonQuote(n.scalar());
    return;
  }
  if (!n.quoted() && (IsPlainNumber(n.scalar()) || IsPlainBool(n.scalar()))) {
    *out += n.scalar();
    return;
  }
  *out += NeedsYamlQuotes(n.scalar()) ? JsonQuote(n.scalar()) : n.scalar();
}

void WriteYaml(const Node& n, int depth, std::string* out) {
  std::string pad(static_cast<size_t>(2 * depth), ' ');
  if (n.IsMap()) {
    for (const auto& [k, v] : n.items()) {
      *out += pad + (NeedsYamlQuotes(k) ? JsonQuote(k) : k) + ":";
      if ((v.IsMap() && !v.items().empty()) || (v.IsList() && !v.elements().empty())) {
        *out += "\n";
        WriteYaml(v, depth + 1, out);
      } else if (v.IsMap()) {
        *out += " {}\n";
      } else if (v.IsList()) {
        *out += " []\n";
      } else {
        *out += " ";
        WriteYamlScalar(v, out);
        *out += "\n";
      }
    }
  } else if (n.IsList()) {
    for (const auto& v : n.elements()) {
      if (v.IsMap() && !v.items().empty()) {
        std::string inner;
        WriteYaml(v, depth + 1, &inner);
        // Put the first key on the dash line.
        *out += pad + "- " + inner.substr(pad.size() + 2);
      } else if (v.IsList() && !v.elements().empty()) {
        *out += pad + "-\n";
        WriteYaml(v, depth + 1, out);
      } else {
        *out += pad + "- ";
        if (v.IsMap())
          *out += "{}";
        else if (v.IsList())
          *out += "[]";
        else
          WriteYamlScalar(v, out);
        *out += "\n";
      }
    }
  } else {
    *out += pad;
    WriteYamlScalar(n, out);
    *out += "\n";
  }
}

}  // namespace

Node Node::Scalar(std::string value, bool quoted) {
  Node n;
  n.kind_ = Kind::kScalar;
  n.scalar_ = std::move(value);
  n.quoted_ = quoted;
  return n;
}

std::string_view Node::KindName() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kScalar:
      return "a scalar";
    case Kind::kMap:
      return "a mapping";
    case Kind::kList:
      return "a list";
  }
  return "?";
}

const Node* Node::Find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

Node* Node::FindMutable(std::string_view key) {
  for (auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

Node& Node::Set(std::string key, Node value) {
  kind_ = Kind::kMap;
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return v;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  return items_.back().second;
}

Node& Node::AddNew(std::string key, Node value) {
  kind_ = Kind::kMap;
  items_.emplace_back(std::move(key), std::move(value));
  return items_.back().second;
}

StatusOr<int64_t> Node::AsInt(std::string_view path) const {
  if (!IsScalar())
    return InvalidArgumentError(std::string(path) + ": expected an integer, got " +
                                std::string(KindName()));
  const std::string& s = scalar_;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE) {
    // Accept integral floats such as 1e6 or 300.0.
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && d == std::floor(d) &&
        std::fabs(d) < 9.2e18) {
      return static_cast<int64_t>(d);
    }
    return InvalidArgumentError(std::string(path) + ": expected an integer, got '" + s + "'");
  }
  return static_cast<int64_t>(v);
}

StatusOr<double> Node::AsDouble(std::string_view path) const {
  if (!IsScalar())
    return InvalidArgumentError(std::string(path) + ": expected a number, got " +
                                std::string(KindName()));
  const std::string& s = scalar_;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return InvalidArgumentError(std::string(path) + ": expected a finite number, got '" + s + "'");
  }
  return v;
}

StatusOr<bool> Node::AsBool(std::string_view path) const {
  if (IsScalar()) {
    if (scalar_ == "true" || scalar_ == "True" || scalar_ == "TRUE") return true;
    if (scalar_ == "false" || scalar_ == "False" || scalar_ == "FALSE") return false;
  }
  return InvalidArgumentError(std::string(path) + ": expected true or false, got '" +
                              (IsScalar() ? scalar_ : std::string(KindName())) + "'");
}

StatusOr<std::string> Node::AsString(std::string_view path) const {
  if (!IsScalar())
    return InvalidArgumentError(std::string(path) + ": expected a string, got " +
                                std::string(KindName()));
  return scalar_;
}

StatusOr<Node> ParseYaml(std::string_view text, const YamlLimits& limits) {
  if (limits.max_bytes > 0 && text.size() > limits.max_bytes) {
    return InvalidArgumentError("the document is " + std::to_string(text.size()) +
                                " bytes, over the limit of " + std::to_string(limits.max_bytes) +
                                " bytes (" + std::to_string(limits.max_bytes >> 20) + " MiB) for " +
                                limits.what);
  }
  std::vector<Line> lines;
  int number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view raw =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    ++number;
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    size_t indent = 0;
    while (indent < raw.size() && raw[indent] == ' ') ++indent;
    if (indent < raw.size() && raw[indent] == '\t') {
      std::string rest = RightTrim(StripComment(raw.substr(indent)));
      if (!rest.empty()) return LineError(number, "tab in indentation (YAML needs spaces)");
    }
    std::string content = RightTrim(StripComment(raw.substr(indent)));
    if (content.empty()) continue;
    if (content == "---" && lines.empty()) continue;
    if (content == "---" || content == "...")
      return LineError(number, "multiple documents are not supported");
    if (content[0] == '&' || content[0] == '*' || content[0] == '!')
      return LineError(number, "anchors, aliases and tags are not supported");
    lines.push_back(Line{number, static_cast<int>(indent), std::move(content)});
  }
  BlockParser parser(std::move(lines), limits.max_depth);
  return parser.ParseDocument();
}

std::string ToJson(const Node& node, int indent) {
  std::string out;
  WriteJson(node, indent, 0, &out);
  return out;
}

std::string ToYaml(const Node& node) {
  std::string out;
  WriteYaml(node, 0, &out);
  return out;
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

namespace {

template <typename T>
std::string Shortest(T v) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string out(buf, r.ptr);
  const size_t e = out.find('e');
  if (e != std::string::npos && out.find('.') == std::string::npos) out.insert(e, ".0");
  return out;
}

}  // namespace

std::string ShortestRoundTrip(double v) { return Shortest(v); }
std::string ShortestRoundTrip(float v) { return Shortest(v); }

}  // namespace moe
