#include "controller/net_policy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/file_util.h"

namespace moe::controller {

bool IsLoopbackAddress(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return true;
  std::string host;
  if (!listen.empty() && listen[0] == '[') {
    const auto close = listen.find(']');
    if (close == std::string::npos) return false;
    host = listen.substr(1, close - 1);
  } else {
    const auto colon = listen.rfind(':');
    host = colon == std::string::npos ? listen : listen.substr(0, colon);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

namespace {

// The pid holding a flock on the file with this device and inode, from the kernel's lock table
// (/proc/locks: "1: FLOCK  ADVISORY  WRITE 4242 08:01:1311 0 EOF"); "unknown" when not found.
std::string FlockHolder(dev_t dev, ino_t ino) {
  auto locks = ReadFileToString("/proc/locks");
  if (!locks.ok()) return "unknown";
  char want[64];
  std::snprintf(want, sizeof(want), "%02x:%02x:%llu", major(dev), minor(dev),
                static_cast<unsigned long long>(ino));
  size_t at = 0;
  while (at < locks->size()) {
    const size_t end = std::min(locks->find('\n', at), locks->size());
    char kind[16] = {0}, mode[16] = {0}, rw[16] = {0}, where[64] = {0};
    long pid = 0;
    if (std::sscanf(locks->substr(at, end - at).c_str(), "%*s %15s %15s %15s %ld %63s", kind, mode,
                    rw, &pid, where) == 5 &&
        std::string(kind) == "FLOCK" && std::string(where) == want) {
      return std::to_string(pid);
    }
    at = end + 1;
  }
  return "unknown";
}

}  // namespace

namespace {

// flock(fd) or FAILED_PRECONDITION naming the holder; closes fd on failure.
Status LockExclusive(int fd, const std::string& path, const std::string& what) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return OkStatus();
  const int err = errno;
  struct stat st {};
  const bool known = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (err != EWOULDBLOCK) return ErrnoError("flock " + path, err);
  return FailedPreconditionError(
      path + " is in use by another moe-controller (pid " +
      (known ? FlockHolder(st.st_dev, st.st_ino) : std::string("unknown")) + "): " + what);
}

// The database file's own lock: a hard link of it in another directory is the same inode, so a
// second controller there finds it held (the directory's lock alone let two controllers share one
// database through a link). A file with more than one link is refused outright: its other name can
// be opened by anything that does not take this lock.
// -1 when there is no database yet.
StatusOr<int> LockDatabaseFile(const std::string& dir) {
  const std::string db = JoinPath(dir, "controller.db");
  const int fd = ::open(db.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return -1;
  if (fd < 0) return ErrnoError("open " + db, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("stat " + db, err);
  }
  if (st.st_nlink > 1) {
    ::close(fd);
    return FailedPreconditionError(
        db + " has " + std::to_string(st.st_nlink) +
        " hard links: another name of the controller's database could be opened by a second "
        "controller; remove the other links (find / -samefile " +
        db + ") and start again");
  }
  MOE_RETURN_IF_ERROR(LockExclusive(fd, db, "one controller per database; stop that one first"));
  return fd;
}

}  // namespace

StateDirLock::~StateDirLock() {
  if (db_fd_ >= 0) ::close(db_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

Status StateDirLock::LockDatabase() {
  if (db_fd_ >= 0) return OkStatus();
  MOE_ASSIGN_OR_RETURN(db_fd_, LockDatabaseFile(dir_));
  if (db_fd_ < 0) return FailedPreconditionError(JoinPath(dir_, "controller.db") + " is missing");
  return OkStatus();
}

StatusOr<StateDirLock> LockStateDir(const std::string& dir) {
  MOE_RETURN_IF_ERROR(MakeDirs(dir));
  ::chmod(dir.c_str(), 0700);  // the store holds worker sessions: the operator's alone
  // The lock is the directory's own: deleting any file in it (the database included) cannot free
  // it.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + dir, errno);
  MOE_RETURN_IF_ERROR(
      LockExclusive(fd, dir, "one controller per state directory; stop that one first"));
  auto db_fd = LockDatabaseFile(dir);
  if (!db_fd.ok()) {
    ::close(fd);
    return db_fd.status();
  }
  // Who holds it, for people (the lock does not depend on this file).
  (void)WriteFileAtomic(JoinPath(dir, "controller.pid"), std::to_string(::getpid()) + "\n");
  return StateDirLock(dir, fd, *db_fd);
}

std::string NetworkFilesystemName(int64_t magic) {
  switch (static_cast<uint32_t>(magic)) {
    case 0x6969u:
      return "nfs";
    case 0xFF534D42u:
      return "cifs";
    case 0xFE534D42u:
      return "smb2";
    case 0x517Bu:
      return "smb";
    case 0x5346414Fu:
      return "afs";
    default:
      return "";
  }
}

Status CheckStateDirFilesystem(const std::string& dir, bool allow) {
  if (allow) return OkStatus();
  std::string at = dir.empty() ? "." : dir;
  struct statfs fs {};
  while (::statfs(at.c_str(), &fs) != 0) {
    if (errno != ENOENT || at == "/" || at == ".") return OkStatus();  // LockStateDir will say
    const size_t slash = at.find_last_of('/');
    at = slash == std::string::npos ? "." : slash == 0 ? "/" : at.substr(0, slash);
  }
  const std::string name = NetworkFilesystemName(static_cast<int64_t>(fs.f_type));
  if (name.empty()) return OkStatus();
  return FailedPreconditionError(
      dir + " is on " + name + " (" + at + "): SQLite's locks cannot be trusted there and the " +
      "controller's state could be corrupted; put the state directory on a local disk or a "
      "parallel " +
      "file system with POSIX locks (Lustre, GPFS, BeeGFS), or pass --allow-network-state-dir");
}

}  // namespace moe::controller
