// Where the controller may be reached and who holds its state: loopback decided on the parsed
// address (never by a prefix of the text), and the lock that keeps one controller per state
// directory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace moe::controller {

// True when `listen` ("host:port", "[v6]:port" or "unix:path") names only this machine: an IPv4
// address in 127.0.0.0/8, ::1, the name "localhost", or a Unix socket. Host names other than
// "localhost" are not loopback (they resolve through DNS).
bool IsLoopbackAddress(const std::string& listen);

// Takes an exclusive lock (flock) on the directory itself, creating it (mode 0700): deleting any
// file in it cannot free the lock; and one on its database file (controller.db) when it exists,
// which a hard link elsewhere shares, refusing a database with more than one link (else
// StateDirLock::LockDatabase once the store has created it). Writes this process's pid to
// <dir>/controller.pid for people. The locks live as long as the returned StateDirLock (the
// controller keeps it for its lifetime). FAILED_PRECONDITION naming the holder's pid (from the
// kernel's lock table) when another process holds it.
class StateDirLock {
 public:
  StateDirLock(std::string dir, int dir_fd, int db_fd)
      : dir_(std::move(dir)), dir_fd_(dir_fd), db_fd_(db_fd) {}
  StateDirLock(StateDirLock&& o) noexcept
      : dir_(std::move(o.dir_)), dir_fd_(o.dir_fd_), db_fd_(o.db_fd_) {
    o.dir_fd_ = o.db_fd_ = -1;
  }
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;
  StateDirLock& operator=(StateDirLock&&) = delete;
  ~StateDirLock();
  // A fresh directory has no database when it is locked (SQLite creates it, and refuses one that is
  // there but empty): called once the store is open, it takes the database's lock then.
  Status LockDatabase();

 private:
  std::string dir_;
  int dir_fd_, db_fd_;
};
StatusOr<StateDirLock> LockStateDir(const std::string& dir);

// The name of a network file system by its statfs magic (nfs, cifs, smb, smb2, afs), or "" for any
// other (local disks, tmpfs, and the parallel file systems whose POSIX locks SQLite can rely on:
// Lustre, GPFS, BeeGFS).
std::string NetworkFilesystemName(int64_t statfs_magic);

// FAILED_PRECONDITION when `dir` (or, when it does not exist yet, its nearest existing parent) lies
// on a network file system whose locks SQLite cannot trust (NFS above all: the SQLite documentation
// warns of corruption), naming it and the flag that overrides; OK elsewhere or when `allow`.
Status CheckStateDirFilesystem(const std::string& dir, bool allow);

}  // namespace moe::controller
