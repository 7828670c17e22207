#include "common/label_selector.h"

#include <cctype>

namespace moe {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// A key or value as labels allow them: no spaces, separators or operators.
bool Plain(const std::string& s) {
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '=' || c == '!' || c == ',' ||
        c == '(' || c == ')')
      return false;
  }
  return true;
}

}  // namespace

StatusOr<LabelSelector> LabelSelector::Parse(const std::string& text, const std::string& what) {
  LabelSelector out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string term =
        Trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (term.empty()) {
      if (text.empty()) break;
      return InvalidArgumentError(what + ": an empty term in '" + text + "'");
    }
    Term t;
    size_t at = std::string::npos, len = 0;
    if ((at = term.find("!=")) != std::string::npos)
      t.op = Term::Op::kNotEquals, len = 2;
    else if ((at = term.find("==")) != std::string::npos)
      t.op = Term::Op::kEquals, len = 2;
    else if ((at = term.find('=')) != std::string::npos)
      t.op = Term::Op::kEquals, len = 1;
    if (at != std::string::npos) {
      t.key = Trim(term.substr(0, at));
      t.value = Trim(term.substr(at + len));
    } else if (term[0] == '!') {
      t.op = Term::Op::kNotExists;
      t.key = Trim(term.substr(1));
    } else {
      t.op = Term::Op::kExists;
      t.key = term;
    }
    if (t.key.empty() || !Plain(t.key) || !Plain(t.value)) {
      return InvalidArgumentError(
          what + ": cannot read '" + term +
          "' (terms are k=v, k==v, k!=v, k or !k, joined by "
          "commas; set-based terms such as 'k in (a,b)' are not supported)");
    }
    out.terms_.push_back(std::move(t));
  }
  return out;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Term& t : terms_) {
    const auto it = labels.find(t.key);
    const bool has = it != labels.end();
    switch (t.op) {
      case Term::Op::kEquals:
        if (!has || it->second != t.value) return false;
        break;
      case Term::Op::kNotEquals:
        if (has && it->second == t.value) return false;
        break;
      case Term::Op::kExists:
        if (!has) return false;
        break;
      case Term::Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace moe
