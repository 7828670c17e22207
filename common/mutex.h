// The project's lock (the controller's, the agent's): std::mutex with abseil's thread-safety
// annotations (ABSL_GUARDED_BY and friends keep checking under clang's -Wthread-safety).
//
// Why not absl::Mutex: Debian's abseil is not built with -fsanitize=thread, so ThreadSanitizer
// cannot see its lock and unlock and reports every pair of accesses guarded by it as a race (make
// test-tsan did: RendezvousStore::Set against Wait, both under the lock). std::mutex goes through
// pthread_mutex_lock, which TSan intercepts whatever library the code is in. Nothing here needs
// what absl::Mutex adds (conditions, reader locks, deadlock detection).
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace moe {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // BasicLockable, for std::condition_variable_any (GroupCommitStore waits with the lock released).
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope, as absl::MutexLock does (takes a pointer, so call sites read the
// same).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace moe
