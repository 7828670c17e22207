#include "worker/engine/comm/store.h"

#include <thread>

#include "common/file_util.h"

namespace moe {

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
      for (size_t j = i; j < keys.size() && j < i + 4; ++j) missing += (missing.empty() ? "" : ", ") + keys[j];
      return DeadlineExceededError("rendezvous: waited " + std::to_string(timeout.count() / 1000) + " s for keys [" +
                                   missing + "] (are all ranks started and reaching the same store?)");
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

StatusOr<std::unique_ptr<KvStore>> OpenStore(const std::string& url) {
  const std::string scheme = "file://";
  if (url.rfind(scheme, 0) != 0 || url.size() == scheme.size()) {
    return InvalidArgumentError("--rendezvous: expected file:///path/to/dir, got '" + url + "'");
  }
  return std::unique_ptr<KvStore>(new FileStore(url.substr(scheme.size())));
}

}  // namespace moe
