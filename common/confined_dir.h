// A directory opened beneath a root and held by its file descriptor, so that what is written
// through it lands where the check said, whatever is swapped in at the path afterwards.
//
// The worker checks a job's paths against its roots (common/path_roots.h) before it starts a rank;
// the rank (moe-train, given the roots) then opens its checkpoint and data directories with
// openat2's RESOLVE_BENEATH from the root's descriptor (Linux 5.6+: ".." and symbolic links may not
// leave the root; absolute symbolic links are refused), or one component at a time with O_NOFOLLOW
// where the kernel has no openat2 (no symbolic link at all). Files inside are reached through
// /proc/self/fd/<fd>/<name>: the held directory, not the path it was opened at.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

// INVALID_ARGUMENT naming `field` when `path` holds a NUL or another control character (bytes below
// 0x20 and 0x7f): a NUL cuts the path where a C API reads it, past every check done on the whole.
Status CheckPathText(const std::string& field, const std::string& path);
// INVALID_ARGUMENT naming `field` when a relative `path` has a ".." component: it is resolved
// beneath a worker's root and may not step out of it (the worker refused it only when the rank
// started; the controller now does at submit). Absolute paths are resolved where they are checked.
Status CheckRelativeStaysBelow(const std::string& field, const std::string& path);

class ConfinedDir {
 public:
  ConfinedDir(const ConfinedDir&) = delete;
  ConfinedDir& operator=(const ConfinedDir&) = delete;
  ~ConfinedDir();

  // `path` (absolute, or relative to the first root) opened as a directory beneath whichever of
  // `roots` contains it lexically, creating the missing components (mode 0755) when `create`.
  // FAILED_PRECONDITION naming `field` when it lies under no root, or resolving it on disk leaves
  // the root (a symbolic link out, a component swapped for one); NOT_FOUND when it is missing and
  // not created.
  static StatusOr<std::unique_ptr<ConfinedDir>> Open(const std::string& field,
                                                     const std::string& path,
                                                     const std::vector<std::string>& roots,
                                                     bool create);

  // Where `name` inside it is reached through the held descriptor ("/proc/self/fd/7/step_10"); the
  // directory itself when `name` is empty.
  std::string Path(const std::string& name = "") const;
  // The path it was opened at (for messages).
  const std::string& shown() const { return shown_; }
  int fd() const { return fd_; }

 private:
  ConfinedDir(int fd, std::string shown) : fd_(fd), shown_(std::move(shown)) {}
  int fd_;
  std::string shown_;
};

// The components of `path` below `root`, both normalized lexically ("/r/a/../b" under "/r" is
// {"b"}); empty with *under false when it is not below the root.
std::vector<std::string> ComponentsBelow(const std::string& path, const std::string& root,
                                         bool* under);

}  // namespace moe
