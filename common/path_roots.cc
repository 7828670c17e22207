#include "common/path_roots.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "common/file_util.h"

namespace moe {

std::string NormalizeAbsolute(const std::string& path, const std::string& base) {
  const std::string full = !path.empty() && path[0] == '/' ? path : base + "/" + path;
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= full.size()) {
    const size_t j = std::min(full.find('/', i), full.size());
    const std::string part = full.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

std::string ResolveOnDisk(const std::string& path) {
  // Walk up to the longest prefix that exists, resolve it, put the rest back.
  std::string head = path, tail;
  while (true) {
    char buf[PATH_MAX];
    if (::realpath(head.c_str(), buf) != nullptr) {
      const std::string resolved = buf;
      return tail.empty() ? resolved
                          : NormalizeAbsolute((resolved == "/" ? "" : resolved) + "/" + tail, "/");
    }
    const size_t slash = head.find_last_of('/');
    if (slash == std::string::npos || head == "/") return path;
    tail = head.substr(slash + 1) + (tail.empty() ? "" : "/" + tail);
    head = slash == 0 ? "/" : head.substr(0, slash);
  }
}

bool IsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

Status CheckUnderRoots(const std::string& field, const std::string& path,
                       const std::vector<std::string>& roots, const std::string& what, bool resolve,
                       const std::string& base) {
  if (roots.empty() || path.empty()) return OkStatus();
  std::string where = NormalizeAbsolute(path, base);
  if (resolve) where = ResolveOnDisk(where);
  std::string list;
  for (const auto& r : roots) {
    const std::string root =
        resolve ? ResolveOnDisk(NormalizeAbsolute(r, base)) : NormalizeAbsolute(r, base);
    if (IsUnder(where, root)) return OkStatus();
    list += (list.empty() ? "" : ", ") + root;
  }
  return FailedPreconditionError(field + ": " + path + (where != path ? " (" + where + ")" : "") +
                                 " is outside this worker's " + what + " roots (" + list +
                                 ") (moe-worker --" + what + "-root)");
}

std::string ResolveRelativeData(const std::string& path, const std::vector<std::string>& roots,
                                const std::string& cwd,
                                const std::function<bool(const std::string&)>& holds) {
  if (!path.empty() && path[0] == '/') {
    const std::string p = NormalizeAbsolute(path, "/");
    return holds(p) ? p : std::string();
  }
  for (const std::string& base : roots) {
    const std::string p = NormalizeAbsolute(path, NormalizeAbsolute(base, "/"));
    if (holds(p)) return p;
  }
  if (cwd.empty()) return "";
  // The worker's directory only where what it names lies below a root: nothing outside the roots
  // is chosen here (the checks after would refuse it, and a root-relative reading stays the rule).
  const std::string p = NormalizeAbsolute(path, NormalizeAbsolute(cwd, "/"));
  for (const std::string& r : roots) {
    if (IsUnder(p, NormalizeAbsolute(r, "/")) && holds(p)) return p;
  }
  return "";
}

std::string ResolveDatasetPath(const std::string& path, const std::vector<std::string>& roots) {
  char buf[4096];
  const std::string cwd = ::getcwd(buf, sizeof(buf)) != nullptr ? buf : "";
  return ResolveRelativeData(path, roots, cwd,
                             [](const std::string& p) { return PathExists(p + ".idx"); });
}

}  // namespace moe
