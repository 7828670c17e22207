// Bearer tokens with roles. A tokens file holds one "<token> <role> [<name>]" per line ('#' starts a
// comment); roles: admin (everything), viewer (read and watch), worker (the WorkerService). Without a
// tokens file every call is allowed (the controller then listens on loopback only).
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace moe::controller {

enum class Role { kNone = 0, kViewer = 1, kWorker = 2, kAdmin = 3 };

class TokenAuth {
 public:
  TokenAuth() = default;
  static StatusOr<TokenAuth> Load(const std::string& path);
  bool enabled() const { return enabled_; }
  // `authorization` is the request's metadata value ("Bearer <token>"). Admin may do anything; the
  // worker and viewer roles only their own.
  Status Check(const std::string& authorization, Role needed) const;

 private:
  bool enabled_ = false;
  std::map<std::string, std::pair<Role, std::string>> tokens_;
};

}  // namespace moe::controller
