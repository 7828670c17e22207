#include "controller/auth.h"

#include <sstream>

#include "common/file_util.h"

namespace moe::controller {

StatusOr<TokenAuth> TokenAuth::Load(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  TokenAuth auth;
  auth.enabled_ = true;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto hash = line.find('#'); hash != std::string::npos) line = line.substr(0, hash);
    std::istringstream fields(line);
    std::string token, role, name;
    if (!(fields >> token)) continue;
    if (!(fields >> role)) return InvalidArgumentError(path + ":" + std::to_string(n) + ": a token needs a role (admin, viewer, worker)");
    fields >> name;
    Role r = role == "admin" ? Role::kAdmin : role == "viewer" ? Role::kViewer : role == "worker" ? Role::kWorker : Role::kNone;
    if (r == Role::kNone) return InvalidArgumentError(path + ":" + std::to_string(n) + ": unknown role '" + role + "' (admin, viewer, worker)");
    if (token.size() < 16) return InvalidArgumentError(path + ":" + std::to_string(n) + ": tokens must be at least 16 characters");
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
  if (have == Role::kAdmin || have == needed) return OkStatus();
  static const char* kNames[] = {"none", "viewer", "worker", "admin"};
  return PermissionDeniedError("token '" + it->second.second + "' has role " + kNames[static_cast<int>(have)] + "; this call needs " +
                               kNames[static_cast<int>(needed)]);
}

}  // namespace moe::controller
