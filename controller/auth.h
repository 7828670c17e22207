// Bearer tokens with roles. A tokens file (mode 0600) holds one "<token> <role> [<name>]" per line
// (a line starting with '#' is a comment; a duplicate token or a malformed line is refused with its
// line number); roles: admin (the JobService: submit, cancel, delete, drain, and all a viewer may),
// viewer (read and watch), worker (the WorkerService only: an admin token is not a worker
// credential). Without a tokens file every call is allowed (the controller then listens on loopback
// only).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/status.h"

namespace moe::controller {

enum class Role { kNone = 0, kViewer = 1, kWorker = 2, kAdmin = 3 };

// Whether two secrets are equal, in time that depends only on their lengths.
bool SameSecret(std::string_view a, std::string_view b);

class TokenAuth {
 public:
  TokenAuth() = default;
  static StatusOr<TokenAuth> Load(const std::string& path);
  bool enabled() const { return enabled_; }
  // `authorization` is the request's metadata value ("Bearer <token>"). Admin may do what a viewer
  // may; otherwise each role only its own. kNone: the caller checks (node credentials: the
  // WorkerService's rendezvous).
  Status Check(const std::string& authorization, Role needed) const;
  // The name of the token in `authorization` (its third field, else its role) once Check passed;
  // empty without authentication.
  std::string Who(const std::string& authorization) const;

 private:
  bool enabled_ = false;
  std::map<std::string, std::pair<Role, std::string>> tokens_;
};

}  // namespace moe::controller
