#include "common/confined_dir.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/path_roots.h"

namespace moe {
namespace {

// openat2 with RESOLVE_BENEATH; -1 with errno ENOSYS where the kernel has none.
int OpenBeneath(int root, const std::string& rel) {
#ifdef SYS_openat2
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof(how)));
#else
  (void)root, (void)rel;
  errno = ENOSYS;
  return -1;
#endif
}

std::string Join(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "/" : "") + parts[i];
  return out;
}

// Why opening failed: an escape (a symbolic link out of the root, an absolute one, or one where
// none may be followed) is the job's doing and permanent; anything else (missing, not a directory,
// an I/O error, a stale handle) may be storage trouble that passes, and is UNAVAILABLE.
Status Escaped(const std::string& field, const std::string& path, const std::string& root,
               int err) {
  if (err == EXDEV || err == ELOOP) {
    return FailedPreconditionError(field + ": " + path + " leaves the root " + root +
                                   " when resolved on disk (" + std::strerror(err) +
                                   ": a symbolic link out of it, or one swapped in)");
  }
  if (err == ENOENT) return NotFoundError(field + ": " + path + " does not exist");
  return UnavailableError(field + ": cannot open " + path + " below " + root + " (" +
                          std::strerror(err) + ")");
}

// Opens parts[0..n) below `root` one component at a time, each with O_NOFOLLOW (no openat2 here).
int OpenNoFollow(int root, const std::vector<std::string>& parts, size_t n, bool create) {
  int cur = ::dup(root);
  for (size_t i = 0; i < n && cur >= 0; ++i) {
    if (create && ::mkdirat(cur, parts[i].c_str(), 0755) != 0 && errno != EEXIST) break;
    const int next = ::openat(cur, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(cur);
    cur = next;
    errno = err;
  }
  return cur;
}

// parts[0..n) beneath `root`, creating what is missing when `create`; -1 with errno on failure.
int OpenParts(int root, const std::vector<std::string>& parts, bool create) {
  if (parts.empty()) return ::dup(root);
  int fd = OpenBeneath(root, Join(parts, parts.size()));
  if (fd >= 0 || errno == ENOSYS) {
    if (fd < 0) return OpenNoFollow(root, parts, parts.size(), create);
    return fd;
  }
  if (errno != ENOENT || !create) return -1;
  for (size_t i = 1; i <= parts.size(); ++i) {  // create each missing component beneath the root
    fd = OpenBeneath(root, Join(parts, i));
    if (fd >= 0) {
      if (i < parts.size()) ::close(fd);
      continue;
    }
    if (errno != ENOENT) return -1;
    const int parent = i == 1 ? ::dup(root) : OpenBeneath(root, Join(parts, i - 1));
    if (parent < 0) return -1;
    const int made = ::mkdirat(parent, parts[i - 1].c_str(), 0755);
    const int err = errno;
    ::close(parent);
    if (made != 0 && err != EEXIST) return errno = err, -1;
    fd = OpenBeneath(root, Join(parts, i));
    if (fd < 0) return -1;
    if (i < parts.size()) ::close(fd);
  }
  return fd;
}

}  // namespace

Status CheckPathText(const std::string& field, const std::string& path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", c);
      return InvalidArgumentError(field + ": a control character (byte " + hex + " at offset " +
                                  std::to_string(i) + "); a path holds none");
    }
  }
  return OkStatus();
}

Status CheckRelativeStaysBelow(const std::string& field, const std::string& path) {
  if (path.empty() || path[0] == '/') return OkStatus();
  for (size_t i = 0; i <= path.size();) {
    const size_t j = std::min(path.find('/', i), path.size());
    if (path.compare(i, j - i, "..") == 0 && j - i == 2) {
      return InvalidArgumentError(field + ": " + path +
                                  " has a '..' component; a relative path is resolved beneath "
                                  "the worker's root and may not leave it (name it from the root "
                                  "down, or give an absolute path)");
    }
    i = j + 1;
  }
  return OkStatus();
}

std::vector<std::string> ComponentsBelow(const std::string& path, const std::string& root,
                                         bool* under) {
  const std::string r = NormalizeAbsolute(root, "/"), p = NormalizeAbsolute(path, "/");
  *under = IsUnder(p, r);
  std::vector<std::string> parts;
  if (!*under || p.size() == r.size()) return parts;
  size_t i = r == "/" ? 1 : r.size() + 1;
  while (i < p.size()) {
    const size_t j = std::min(p.find('/', i), p.size());
    parts.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

ConfinedDir::~ConfinedDir() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<ConfinedDir>> ConfinedDir::Open(const std::string& field,
                                                         const std::string& path,
                                                         const std::vector<std::string>& roots,
                                                         bool create) {
  MOE_RETURN_IF_ERROR(CheckPathText(field, path));
  if (roots.empty())
    return FailedPreconditionError(field + ": no roots to open " + path + " beneath");
  const std::string full = NormalizeAbsolute(path, NormalizeAbsolute(roots.front(), "/"));
  for (const std::string& root : roots) {
    bool under = false;
    const std::vector<std::string> parts = ComponentsBelow(full, root, &under);
    if (!under) continue;
    const std::string r = NormalizeAbsolute(root, "/");
    const int rootfd = ::open(r.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
      return UnavailableError(field + ": cannot open the root " + r + ": " + std::strerror(errno));
    const int fd = OpenParts(rootfd, parts, create);
    const int err = errno;
    ::close(rootfd);
    if (fd < 0) return Escaped(field, full, r, err);
    return std::unique_ptr<ConfinedDir>(new ConfinedDir(fd, full));
  }
  std::string list;
  for (const auto& r : roots) list += (list.empty() ? "" : ", ") + r;
  return FailedPreconditionError(field + ": " + full + " is outside the roots (" + list + ")");
}

std::string ConfinedDir::Path(const std::string& name) const {
  const std::string dir = "/proc/self/fd/" + std::to_string(fd_);
  return name.empty() ? dir : dir + "/" + name;
}

}  // namespace moe
