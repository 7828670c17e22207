// Where the controller may be reached and who holds its state: loopback decided on the parsed
// address (never by a prefix of the text), and the lock that keeps one controller per state
// directory.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace moe::controller {

// True when `listen` ("host:port", "[v6]:port" or "unix:path") names only this machine: an IPv4
// address in 127.0.0.0/8, ::1, the name "localhost", or a Unix socket. Host names other than
// "localhost" are not loopback (they resolve through DNS).
bool IsLoopbackAddress(const std::string& listen);

// Takes an exclusive lock (flock) on the directory itself, creating it (mode 0700): deleting any
// file in it cannot free the lock. Writes this process's pid to <dir>/controller.pid for people.
// The lock lives as long as the process (the returned descriptor is never closed).
// FAILED_PRECONDITION naming the holder's pid (from the kernel's lock table) when another process
// holds it.
StatusOr<int> LockStateDir(const std::string& dir);

// The name of a network file system by its statfs magic (nfs, cifs, smb, smb2, afs), or "" for any
// other (local disks, tmpfs, and the parallel file systems whose POSIX locks SQLite can rely on:
// Lustre, GPFS, BeeGFS).
std::string NetworkFilesystemName(int64_t statfs_magic);

// FAILED_PRECONDITION when `dir` (or, when it does not exist yet, its nearest existing parent) lies
// on a network file system whose locks SQLite cannot trust (NFS above all: the SQLite documentation
// warns of corruption), naming it and the flag that overrides; OK elsewhere or when `allow`.
Status CheckStateDirFilesystem(const std::string& dir, bool allow);

}  // namespace moe::controller
