// Kubernetes' equality-based label selectors, as `moectl get jobs -l` takes them:
//   team=research,tier!=low,spot,!preemptible
// terms joined by commas, all must hold: `k=v` or `k==v` (the label is v), `k!=v` (absent or not
// v), `k` (present), `!k` (absent). Set-based terms (`k in (a,b)`) are refused with a clear error.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

class LabelSelector {
 public:
  // The error names `what` (e.g. "--selector") and the term it could not read.
  static StatusOr<LabelSelector> Parse(const std::string& text,
                                       const std::string& what = "--selector");
  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return terms_.empty(); }

 private:
  struct Term {
    enum class Op { kEquals, kNotEquals, kExists, kNotExists } op;
    std::string key, value;
  };
  std::vector<Term> terms_;
};

}  // namespace moe
