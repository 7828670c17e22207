#include "controller/net_policy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

StatusOr<int> LockStateDir(const std::string& dir) {
  MOE_RETURN_IF_ERROR(MakeDirs(dir));
  ::chmod(dir.c_str(), 0700);  // the store holds worker sessions: the operator's alone
  const std::string path = JoinPath(dir, "controller.lock");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    if (err != EWOULDBLOCK) return ErrnoError("flock " + path, err);
    return FailedPreconditionError(dir + " is in use by another moe-controller (pid " + pid +
                                   ", holding " + path + "): one controller per state directory");
  }
  const std::string mine = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size())) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("write " + path, err);
  }
  return fd;
}

}  // namespace moe::controller
