#include "worker/agent/cpu_cores.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace moe::worker {
namespace {

std::string LockDir(const std::string& dir) {
  if (!dir.empty()) return dir;
  const std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : [] {
    const char* t = std::getenv("TMPDIR");
    return std::string(t && *t ? t : "/tmp");
  }();
  return base + "/moe-cpu-cores-" + std::to_string(::getuid());
}

}  // namespace

CoreClaim CoreClaim::Take(int cores, const std::string& dir) {
  CoreClaim claim;
  const std::string where = LockDir(dir);
  if (::mkdir(where.c_str(), 0700) != 0 && errno != EEXIST) return claim;
  for (int core = 0; core < cores; ++core) {
    const std::string path = where + "/core-" + std::to_string(core) + ".lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      claim.fds_.push_back(fd);
    } else {
      ::close(fd);  // another agent holds it
    }
  }
  return claim;
}

CoreClaim& CoreClaim::operator=(CoreClaim&& o) noexcept {
  if (this != &o) {
    Release();
    fds_ = std::move(o.fds_);
    o.fds_.clear();
  }
  return *this;
}

CoreClaim::~CoreClaim() { Release(); }

void CoreClaim::Release() {
  for (const int fd : fds_) ::close(fd);
  fds_.clear();
}

}  // namespace moe::worker
