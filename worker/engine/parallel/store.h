// Rendezvous key-value store: how the ranks of a job find each other (Gloo's addresses, NCCL's
// unique id). FileStore serves standalone runs (moe-train --nproc) through a shared directory; the
// worker agent implements the same interface over the controller's key-value store.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::parallel {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // NOT_FOUND when the key is not there (yet).
  virtual StatusOr<std::string> Get(const std::string& key) = 0;
  // Waits until every key exists; DEADLINE_EXCEEDED after `timeout`.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
};

// One file per key in a directory (written to a temporary name, then renamed). The directory must
// be fresh for each run: keys from an earlier run would be read as this run's.
class FileStore final : public KvStore {
 public:
  explicit FileStore(std::string dir);
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key) override;

 private:
  std::string Path(const std::string& key) const;
  std::string dir_;
};

// Namespaces another store's keys: "<prefix>/<key>".
class PrefixStore final : public KvStore {
 public:
  PrefixStore(std::string prefix, KvStore* base) : prefix_(std::move(prefix)), base_(base) {}
  Status Set(const std::string& key, const std::string& value) override {
    return base_->Set(prefix_ + "/" + key, value);
  }
  StatusOr<std::string> Get(const std::string& key) override {
    return base_->Get(prefix_ + "/" + key);
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::string prefix_;
  KvStore* base_;
};

// The worker agent's store, over a Unix socket: the agent forwards each request to the controller's
// key-value store (so the engine needs no gRPC). The line protocol: common/kv_protocol.h.
class UnixSocketStore final : public KvStore {
 public:
  static StatusOr<std::unique_ptr<UnixSocketStore>> Connect(const std::string& path);
  ~UnixSocketStore() override;
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  explicit UnixSocketStore(int fd) : fd_(fd) {}
  StatusOr<std::string> Request(const std::string& line);
  int fd_;
  std::string buffer_;
};

// Parses "file:///path" (FileStore) or "unix:///path" (UnixSocketStore).
StatusOr<std::unique_ptr<KvStore>> OpenStore(const std::string& url);

}  // namespace moe::parallel
