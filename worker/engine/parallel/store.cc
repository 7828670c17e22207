#include "worker/engine/parallel/store.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/file_util.h"
#include "common/kv_protocol.h"

namespace moe::parallel {

Status KvStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto sleep = std::chrono::milliseconds(1);
  for (size_t i = 0; i < keys.size();) {
    auto v = Get(keys[i]);
    if (v.ok()) {
      ++i;
      continue;
    }
    if (v.status().code() != StatusCode::kNotFound) return v.status();
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (size_t j = i; j < keys.size() && j < i + 4; ++j)
        missing += (missing.empty() ? "" : ", ") + keys[j];
      return DeadlineExceededError("rendezvous: waited " + std::to_string(timeout.count() / 1000) +
                                   " s for keys [" + missing +
                                   "] (are all ranks started and reaching the same store?)");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
  }
  return OkStatus();
}

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {}

std::string FileStore::Path(const std::string& key) const {
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      name += buf;
    }
  }
  return JoinPath(dir_, name);
}

Status FileStore::Set(const std::string& key, const std::string& value) {
  MOE_RETURN_IF_ERROR(MakeDirs(dir_));
  return WriteFileAtomic(Path(key), value);
}

StatusOr<std::string> FileStore::Get(const std::string& key) {
  auto v = ReadFileToString(Path(key));
  if (!v.ok() && v.status().code() == StatusCode::kNotFound) return NotFoundError("key " + key);
  return v;
}

Status PrefixStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  for (const auto& k : keys) full.push_back(prefix_ + "/" + k);
  return base_->Wait(full, timeout);
}

StatusOr<std::unique_ptr<UnixSocketStore>> UnixSocketStore::Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    ::close(fd);
    return InvalidArgumentError("--rendezvous: socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("connect to the worker agent's rendezvous socket " + path, err);
  }
  return std::unique_ptr<UnixSocketStore>(new UnixSocketStore(fd));
}

UnixSocketStore::~UnixSocketStore() { ::close(fd_); }

StatusOr<std::string> UnixSocketStore::Request(const std::string& line) {
  const std::string msg = line + "\n";
  size_t off = 0;
  while (off < msg.size()) {
    const ssize_t n = ::send(fd_, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(std::string("rendezvous: the worker agent's socket failed: ") +
                              std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  while (true) {
    const auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string reply = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return reply;
    }
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return UnavailableError("rendezvous: the worker agent closed its socket");
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

Status UnixSocketStore::Set(const std::string& key, const std::string& value) {
  KvRequest r;
  r.op = KvRequest::Op::kSet;
  r.keys = {key};
  r.value = value;
  MOE_ASSIGN_OR_RETURN(std::string reply, Request(FormatKvRequest(r)));
  return ParseKvReply(reply, nullptr);
}

StatusOr<std::string> UnixSocketStore::Get(const std::string& key) {
  KvRequest r;
  r.op = KvRequest::Op::kGet;
  r.keys = {key};
  MOE_ASSIGN_OR_RETURN(std::string reply, Request(FormatKvRequest(r)));
  std::string value;
  if (Status st = ParseKvReply(reply, &value); !st.ok()) {
    return st.code() == StatusCode::kNotFound ? NotFoundError("key " + key) : st;
  }
  return value;
}

Status UnixSocketStore::Wait(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  KvRequest r;
  r.op = KvRequest::Op::kWait;
  r.keys = keys;
  r.timeout_ms = timeout.count();
  MOE_ASSIGN_OR_RETURN(std::string reply, Request(FormatKvRequest(r)));
  return ParseKvReply(reply, nullptr);
}

StatusOr<std::unique_ptr<KvStore>> OpenStore(const std::string& url) {
  const std::string file = "file://", unix_scheme = "unix://";
  if (url.rfind(file, 0) == 0 && url.size() > file.size())
    return std::unique_ptr<KvStore>(new FileStore(url.substr(file.size())));
  if (url.rfind(unix_scheme, 0) == 0 && url.size() > unix_scheme.size()) {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<UnixSocketStore> s,
                         UnixSocketStore::Connect(url.substr(unix_scheme.size())));
    return std::unique_ptr<KvStore>(std::move(s));
  }
  return InvalidArgumentError(
      "--rendezvous: expected file:///path/to/dir or unix:///path/to/socket, got '" + url + "'");
}

}  // namespace moe::parallel
