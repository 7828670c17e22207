#include "controller/auth.h"

#include <sstream>

#include "common/file_util.h"
#include "common/grpc_client.h"

namespace moe::controller {

StatusOr<TokenAuth> TokenAuth::Load(const std::string& path) {
  MOE_RETURN_IF_ERROR(CheckSecretFileMode(path));
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TokenAuth auth;
  auth.enabled_ = true;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    std::istringstream fields(line);
    std::string token, role, name, extra;
    // A comment is a whole line starting with '#': a '#' inside a token is part of it.
    if (!(fields >> token) || token[0] == '#') continue;
    if (!(fields >> role)) return InvalidArgumentError(path + ":" + std::to_string(n) + ": a token needs a role (admin, viewer, worker)");
    fields >> name;
    if (fields >> extra) return InvalidArgumentError(where + "expected '<token> <role> [name]', found more");
    Role r = role == "admin" ? Role::kAdmin : role == "viewer" ? Role::kViewer : role == "worker" ? Role::kWorker : Role::kNone;
    if (r == Role::kNone) return InvalidArgumentError(path + ":" + std::to_string(n) + ": unknown role '" + role + "' (admin, viewer, worker)");
    if (token.size() < 16) return InvalidArgumentError(path + ":" + std::to_string(n) + ": tokens must be at least 16 characters");
    if (auth.tokens_.count(token)) return InvalidArgumentError(where + "this token is already on an earlier line");
    auth.tokens_[token] = {r, name.empty() ? role : name};
  }
  if (auth.tokens_.empty()) return InvalidArgumentError(path + ": no tokens");
  return auth;
}

Status TokenAuth::Check(const std::string& authorization, Role needed) const {
  if (!enabled_) return OkStatus();
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) != 0) return UnauthenticatedError("a bearer token is required (authorization: Bearer <token>)");
  auto it = tokens_.find(authorization.substr(prefix.size()));
  if (it == tokens_.end()) return UnauthenticatedError("unknown token");
  const Role have = it->second.first;
  // Admin covers what people do (JobService), never the WorkerService: a worker is its own principal.
  if (have == needed || (have == Role::kAdmin && needed == Role::kViewer)) return OkStatus();
  static const char* kNames[] = {"none", "viewer", "worker", "admin"};
  return PermissionDeniedError("token '" + it->second.second + "' has role " + kNames[static_cast<int>(have)] + "; this call needs " +
                               kNames[static_cast<int>(needed)]);
}

}  // namespace moe::controller
