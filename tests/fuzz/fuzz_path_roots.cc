// Spec paths against a worker's roots: whatever path a job names, what the checks let through lies
// below the root, lexically and on disk. The input is a root and a path (split at the first 0xff
// byte; no split: the whole input is the path below a fixed root). On disk the root holds a small
// tree with symbolic links that stay inside and ones that leave it (to an absolute path and through
// ".."); a path ConfinedDir opens must resolve below the root's real path, or the target traps.
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "common/confined_dir.h"
#include "common/path_roots.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::string> Split(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= p.size()) {
    const size_t j = std::min(p.find('/', i), p.size());
    if (j > i) out.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// What NormalizeAbsolute promises: absolute, no empty, "." or ".." component, no trailing slash.
void CheckNormal(const std::string& n) {
  if (n.empty() || n[0] != '/') __builtin_trap();
  if (n != "/" && n.back() == '/') __builtin_trap();
  for (const std::string& c : Split(n)) {
    if (c == "." || c == "..") __builtin_trap();
  }
  if (n.find("//") != std::string::npos) __builtin_trap();
}

// The tree the on-disk checks run in: root/{a/{b, in -> ../c, out -> <outside>, up -> ../..}, c}.
const std::string& Root() {
  static const std::string root = [] {
    const std::string base = moe::fuzz::ScratchDir();
    const std::string r = base + "/root", outside = base + "/outside";
    for (const std::string& d : {r, r + "/a", r + "/a/b", r + "/c", outside})
      ::mkdir(d.c_str(), 0755);
    (void)::symlink("../c", (r + "/a/in").c_str());
    (void)::symlink(outside.c_str(), (r + "/a/out").c_str());
    (void)::symlink("../..", (r + "/a/up").c_str());
    char real[PATH_MAX];
    return std::string(::realpath(r.c_str(), real) ? real : r.c_str());
  }();
  return root;
}

void CheckOnDisk(const std::string& path) {
  auto dir = moe::ConfinedDir::Open("spec.checkpoint.dir", path, {Root()}, /*create=*/false);
  if (!dir.ok()) return;
  char where[PATH_MAX];
  const ssize_t n = ::readlink((*dir)->Path().c_str(), where, sizeof(where) - 1);
  if (n <= 0) return;
  where[n] = 0;
  if (!moe::IsUnder(where, Root())) __builtin_trap();  // an escape
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\xff');
  const std::string root = cut == std::string::npos ? "/data/jobs" : in.substr(0, cut);
  const std::string path = cut == std::string::npos ? in : in.substr(cut + 1);
  const std::string norm = moe::NormalizeAbsolute(path, "/base"),
                    nroot = moe::NormalizeAbsolute(root, "/");
  CheckNormal(norm);
  CheckNormal(nroot);
  // Accepted lexically: every component of the root (relative to the same base) leads the
  // path's. An empty path is "not given", which CheckUnderRoots lets through by design.
  if (!root.empty() && !path.empty() &&
      moe::CheckUnderRoots("f", path, {root}, "data", false, "/base").ok()) {
    const auto r = Split(moe::NormalizeAbsolute(root, "/base")), p = Split(norm);
    if (p.size() < r.size()) __builtin_trap();
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] != p[i]) __builtin_trap();
    }
  }
  // A control character is refused before anything looks at the disk.
  bool control = false;
  for (unsigned char c : path) control |= c < 0x20 || c == 0x7f;
  if (control != !moe::CheckPathText("f", path).ok()) __builtin_trap();
  if (!control && path.size() < 512) CheckOnDisk(path);
  return 0;
}
