#include "cli/jsonpath.h"

#include <cctype>
#include <charconv>
#include <memory>
#include <string_view>

#include "common/escape.h"

namespace moe::cli {
namespace {

struct Filter;

struct Step {
  enum class Kind { kKey, kAll, kIndex, kSlice, kRecursive, kFilter };
  Kind kind = Kind::kKey;
  std::string key;  // kKey; kRecursive ("*": every value below)
  long a = 0, b = 0;
  bool has_a = false, has_b = false;  // kSlice's bounds given
  std::shared_ptr<Filter> filter;
};

struct Path {
  bool from_root = false;  // `$`: the object, whatever the current element is
  std::vector<Step> steps;
};

// [?(@.path OP literal)] or [?(@.path)] (the path finds something).
struct Filter {
  Path lhs;
  std::string op;  // "" (exists), ==, !=, <, <=, >, >=
  std::string rhs;
  bool rhs_quoted = false;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsQuoted(std::string_view s) {
  return s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front();
}

bool ParseLong(std::string_view s, long* out) {
  s = Trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

// The index of the character that closes what opens at `from` (`close`), outside quotes and
// parentheses; npos when none does.
size_t Closing(std::string_view s, size_t from, char close) {
  char quote = 0;
  int depth = 0;
  for (size_t i = from + 1; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == close && depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

StatusOr<Path> ParsePath(std::string_view s);

Status Bad(std::string_view what, std::string_view at) {
  return InvalidArgumentError("jsonpath: " + std::string(what) + " at '" + std::string(at) + "'");
}

StatusOr<Step> ParseFilter(std::string_view in) {
  const std::string_view body = Trim(in.substr(2, in.size() - 3));  // inside ?( )
  static constexpr std::string_view kOps[] = {"==", "!=", "<=", ">=", "<", ">"};
  size_t at = std::string_view::npos, len = 0;
  char quote = 0;
  for (size_t i = 0; i < body.size() && at == std::string_view::npos; ++i) {
    if (quote != 0) {
      if (body[i] == quote) quote = 0;
      continue;
    }
    if (body[i] == '\'' || body[i] == '"') quote = body[i];
    for (std::string_view op : kOps) {
      if (quote == 0 && body.substr(i, op.size()) == op) {
        at = i;
        len = op.size();
        break;
      }
    }
  }
  auto f = std::make_shared<Filter>();
  const std::string_view lhs = Trim(body.substr(0, at));
  MOE_ASSIGN_OR_RETURN(f->lhs, ParsePath(lhs));
  if (at != std::string_view::npos) {
    f->op = std::string(body.substr(at, len));
    std::string_view rhs = Trim(body.substr(at + len));
    if (rhs.empty()) return Bad("a value after '" + f->op + "'", body);
    f->rhs_quoted = IsQuoted(rhs);
    f->rhs = std::string(f->rhs_quoted ? rhs.substr(1, rhs.size() - 2) : rhs);
  }
  Step st;
  st.kind = Step::Kind::kFilter;
  st.filter = std::move(f);
  return st;
}

// What one [...] holds: *, 'key', N, A:B or ?(filter).
StatusOr<Step> ParseBracket(std::string_view in) {
  Step st;
  if (in == "*") {
    st.kind = Step::Kind::kAll;
  } else if (IsQuoted(in)) {
    st.key = std::string(in.substr(1, in.size() - 2));
  } else if (in.size() >= 3 && in.substr(0, 2) == "?(" && in.back() == ')') {
    return ParseFilter(in);
  } else if (const size_t colon = in.find(':'); colon != std::string_view::npos) {
    st.kind = Step::Kind::kSlice;
    const std::string_view lo = Trim(in.substr(0, colon)), hi = Trim(in.substr(colon + 1));
    st.has_a = !lo.empty();
    st.has_b = !hi.empty();
    if ((st.has_a && !ParseLong(lo, &st.a)) || (st.has_b && !ParseLong(hi, &st.b)))
      return Bad("a slice of integers", in);
  } else {
    st.kind = Step::Kind::kIndex;
    if (!ParseLong(in, &st.a)) return Bad("an index, '*', a quoted key, a slice or ?()", in);
  }
  return st;
}

// `.name`, `..name`, `.*` or a bare `.` (the current element) at s[*pos].
Status ParseDot(std::string_view s, size_t* pos, Path* p) {
  const bool recursive = s.substr(*pos, 2) == "..";
  *pos += recursive ? 2 : 1;
  const size_t start = *pos;
  while (*pos < s.size()) {
    const char c = s[*pos];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '*') break;
    ++*pos;
  }
  Step st;
  st.key = std::string(s.substr(start, *pos - start));
  if (st.key.empty()) return recursive ? Bad("a name after '..'", s.substr(start)) : OkStatus();
  if (recursive)
    st.kind = Step::Kind::kRecursive;
  else if (st.key == "*")
    st.kind = Step::Kind::kAll;
  p->steps.push_back(std::move(st));
  return OkStatus();
}

StatusOr<Path> ParsePath(std::string_view s) {
  Path p;
  size_t pos = 0;
  if (!s.empty() && (s[0] == '$' || s[0] == '@')) {
    p.from_root = s[0] == '$';
    pos = 1;
  } else if (s.empty() || (s[0] != '.' && s[0] != '[')) {
    return Bad("a path starts with '.', '$', '@' or '['", s);
  }
  while (pos < s.size()) {
    if (s[pos] == '.') {
      MOE_RETURN_IF_ERROR(ParseDot(s, &pos, &p));
    } else if (s[pos] == '[') {
      const size_t end = Closing(s, pos, ']');
      if (end == std::string_view::npos) return Bad("an unclosed '['", s.substr(pos));
      MOE_ASSIGN_OR_RETURN(Step st, ParseBracket(Trim(s.substr(pos + 1, end - pos - 1))));
      p.steps.push_back(std::move(st));
      pos = end + 1;
    } else {
      return Bad("expected '.' or '['", s.substr(pos));
    }
  }
  return p;
}

std::vector<const Node*> Eval(const Path& p, const Node* current, const Node& root);

// Every value under `n` (itself included) that a key `key` names ("*": every value).
void Descend(const Node& n, const std::string& key, std::vector<const Node*>* out) {
  if (n.IsMap()) {
    for (const auto& [k, v] : n.items()) {
      if (key == "*" || k == key) out->push_back(&v);
    }
    for (const auto& [k, v] : n.items()) Descend(v, key, out);
  } else if (n.IsList()) {
    for (const auto& v : n.elements()) Descend(v, key, out);
  }
}

bool Compare(const std::string& x, const std::string& op, const Filter& f) {
  double a = 0, b = 0;
  const auto whole = [](const std::string& s, double* v) {  // the whole text a number, not a prefix
    const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
  };
  const bool numeric = !f.rhs_quoted && whole(x, &a) && whole(f.rhs, &b);
  const int c = numeric ? (a < b ? -1 : a > b ? 1 : 0) : x.compare(f.rhs);
  if (op == "==") return c == 0;
  if (op == "!=") return c != 0;
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

bool Holds(const Filter& f, const Node& e, const Node& root) {
  const std::vector<const Node*> vals = Eval(f.lhs, &e, root);
  if (f.op.empty()) return !vals.empty();
  return !vals.empty() && vals[0]->IsScalar() && Compare(vals[0]->scalar(), f.op, f);
}

void Slice(const Step& st, const Node& n, std::vector<const Node*>* out) {
  const long size = static_cast<long>(n.elements().size());
  auto clamp = [size](long v) { return std::max(0L, std::min(size, v < 0 ? size + v : v)); };
  const long lo = st.has_a ? clamp(st.a) : 0, hi = st.has_b ? clamp(st.b) : size;
  for (long i = lo; i < hi; ++i) out->push_back(&n.elements()[static_cast<size_t>(i)]);
}

void Apply(const Step& st, const Node& n, const Node& root, std::vector<const Node*>* out) {
  switch (st.kind) {
    case Step::Kind::kKey:
      if (const Node* v = n.IsMap() ? n.Find(st.key) : nullptr) out->push_back(v);
      return;
    case Step::Kind::kAll:
      for (const auto& [k, v] : n.items()) out->push_back(&v);
      for (const auto& v : n.elements()) out->push_back(&v);
      return;
    case Step::Kind::kIndex: {
      const long size = static_cast<long>(n.elements().size());
      const long i = st.a < 0 ? size + st.a : st.a;
      if (n.IsList() && i >= 0 && i < size) out->push_back(&n.elements()[static_cast<size_t>(i)]);
      return;
    }
    case Step::Kind::kSlice:
      if (n.IsList()) Slice(st, n, out);
      return;
    case Step::Kind::kRecursive:
      Descend(n, st.key, out);
      return;
    case Step::Kind::kFilter:
      for (const auto& v : n.elements()) {
        if (Holds(*st.filter, v, root)) out->push_back(&v);
      }
      return;
  }
}

std::vector<const Node*> Eval(const Path& p, const Node* current, const Node& root) {
  std::vector<const Node*> cur = {p.from_root ? &root : current};
  for (const Step& st : p.steps) {
    std::vector<const Node*> next;
    for (const Node* n : cur) Apply(st, *n, root, &next);
    cur = std::move(next);
  }
  return cur;
}

std::string Render(const Node& n) {
  if (n.IsNull()) return "";
  // A value others wrote (a name, a message) prints its control characters escaped, never obeyed.
  return n.IsScalar() ? EscapeControl(n.scalar()) : EscapeHiddenAsUnicode(ToJson(n));
}

std::string JoinRendered(const std::vector<const Node*>& vals, const char* sep) {
  std::string out;
  for (size_t i = 0; i < vals.size(); ++i) out += (i > 0 ? sep : "") + Render(*vals[i]);
  return out;
}

struct Item {
  enum class Kind { kText, kPath, kRange, kEnd };
  Kind kind = Kind::kText;
  std::string text;
  Path path;
};

// A {"..."} literal's text: \n, \t, \\ and \" read as the characters they name.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
  }
  return out;
}

StatusOr<Item> ParseExpression(std::string_view e) {
  Item it;
  if (e == "end") {
    it.kind = Item::Kind::kEnd;
  } else if (e.substr(0, 6) == "range ") {
    it.kind = Item::Kind::kRange;
    MOE_ASSIGN_OR_RETURN(it.path, ParsePath(Trim(e.substr(6))));
  } else if (IsQuoted(e)) {
    it.text = Unescape(e.substr(1, e.size() - 2));
  } else {
    it.kind = Item::Kind::kPath;
    MOE_ASSIGN_OR_RETURN(it.path, ParsePath(e));
  }
  return it;
}

StatusOr<std::vector<Item>> ParseTemplate(std::string_view t) {
  std::vector<Item> items;
  int open = 0;  // ranges not yet ended
  for (size_t i = 0; i < t.size();) {
    if (t[i] != '{') {
      const size_t next = std::min(t.find('{', i), t.size());
      items.push_back(Item{Item::Kind::kText, std::string(t.substr(i, next - i)), {}});
      i = next;
      continue;
    }
    const size_t close = Closing(t, i, '}');
    if (close == std::string_view::npos) return Bad("an unclosed '{'", t.substr(i));
    MOE_ASSIGN_OR_RETURN(Item it, ParseExpression(Trim(t.substr(i + 1, close - i - 1))));
    open += it.kind == Item::Kind::kRange ? 1 : it.kind == Item::Kind::kEnd ? -1 : 0;
    if (open < 0) return Bad("an {end} with no {range}", t.substr(i));
    items.push_back(std::move(it));
    i = close + 1;
  }
  if (open != 0) return InvalidArgumentError("jsonpath: a {range} with no {end}");
  return items;
}

size_t MatchingEnd(const std::vector<Item>& items, size_t range) {
  int depth = 0;
  for (size_t i = range; i < items.size(); ++i) {
    depth += items[i].kind == Item::Kind::kRange ? 1 : items[i].kind == Item::Kind::kEnd ? -1 : 0;
    if (depth == 0) return i;
  }
  return items.size();
}

void Run(const std::vector<Item>& items, size_t begin, size_t end, const Node* cur,
         const Node& root, std::string* out) {
  for (size_t i = begin; i < end; ++i) {
    const Item& it = items[i];
    if (it.kind == Item::Kind::kText) {
      *out += it.text;
    } else if (it.kind == Item::Kind::kPath) {
      *out += JoinRendered(Eval(it.path, cur, root), " ");
    } else if (it.kind == Item::Kind::kRange) {
      const size_t stop = MatchingEnd(items, i);
      for (const Node* v : Eval(it.path, cur, root)) Run(items, i + 1, stop, v, root, out);
      i = stop;
    }
  }
}

// Top-level commas split the columns (a filter's or a quoted key's commas do not).
std::vector<std::string_view> SplitColumns(std::string_view spec) {
  std::vector<std::string_view> out;
  size_t start = 0;
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    const char c = i < spec.size() ? spec[i] : ',';
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '(') {
      ++depth;
    } else if (c == ']' || c == ')') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(spec.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

StatusOr<std::string> JsonPath(const std::string& tmpl, const Node& root) {
  // `-o jsonpath=.state` as `{.state}`: a lone path needs no braces.
  const bool bare =
      tmpl.find('{') == std::string::npos && !tmpl.empty() && (tmpl[0] == '.' || tmpl[0] == '$');
  MOE_ASSIGN_OR_RETURN(std::vector<Item> items, ParseTemplate(bare ? "{" + tmpl + "}" : tmpl));
  std::string out;
  Run(items, 0, items.size(), &root, root, &out);
  return out;
}

StatusOr<TableRows> CustomColumns(const std::string& spec, const Node& items) {
  TableRows t;
  std::vector<Path> paths;
  for (std::string_view col : SplitColumns(spec)) {
    const size_t colon = col.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == col.size()) {
      return InvalidArgumentError("custom-columns: '" + std::string(col) +
                                  "' is not NAME:PATH (e.g. ID:.id,STATE:.state)");
    }
    std::string_view path = Trim(col.substr(colon + 1));
    if (path.size() >= 2 && path.front() == '{' && path.back() == '}')
      path = Trim(path.substr(1, path.size() - 2));
    if (path.empty())
      return InvalidArgumentError("custom-columns: '" + std::string(col) + "' has no path");
    const std::string relaxed = path[0] == '.' || path[0] == '$' || path[0] == '@' || path[0] == '['
                                    ? std::string(path)
                                    : "." + std::string(path);  // kubectl's "metadata.name"
    MOE_ASSIGN_OR_RETURN(Path p, ParsePath(relaxed));
    t.header.emplace_back(col.substr(0, colon));
    paths.push_back(std::move(p));
  }
  std::vector<const Node*> rows;
  if (items.IsList()) {
    for (const auto& e : items.elements()) rows.push_back(&e);
  } else {
    rows.push_back(&items);
  }
  for (const Node* e : rows) {
    std::vector<std::string> row;
    for (const Path& p : paths) {
      const std::string cell = JoinRendered(Eval(p, e, *e), ",");
      row.push_back(cell.empty() ? "<none>" : cell);
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace moe::cli
