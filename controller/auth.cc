#include "controller/auth.h"

#include <algorithm>
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
    if (!(fields >> role))
      return InvalidArgumentError(path + ":" + std::to_string(n) +
                                  ": a token needs a role (admin, viewer, worker)");
    fields >> name;
    if (fields >> extra)
      return InvalidArgumentError(where + "expected '<token> <role> [name]', found more");
    Role r = role == "admin"    ? Role::kAdmin
             : role == "viewer" ? Role::kViewer
             : role == "worker" ? Role::kWorker
                                : Role::kNone;
    if (r == Role::kNone)
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": unknown role '" + role +
                                  "' (admin, viewer, worker)");
    if (token.size() < 16)
      return InvalidArgumentError(path + ":" + std::to_string(n) +
                                  ": tokens must be at least 16 characters");
    if (auth.tokens_.count(token))
      return InvalidArgumentError(where + "this token is already on an earlier line");
    auth.tokens_[token] = {r, name.empty() ? role : name};
  }
  if (auth.tokens_.empty()) return InvalidArgumentError(path + ": no tokens");
  return auth;
}

// Equal or not, in time that depends on the lengths only: every byte is compared, no early exit, so
// a caller cannot find a token's prefix by timing refusals.
bool SameSecret(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

Status TokenAuth::Check(const std::string& authorization, Role needed) const {
  if (!enabled_ || needed == Role::kNone) return OkStatus();
  const std::string prefix = "Bearer ";
  if (authorization.rfind(prefix, 0) != 0)
    return UnauthenticatedError("a bearer token is required (authorization: Bearer <token>)");
  const std::string_view given = std::string_view(authorization).substr(prefix.size());
  const std::pair<Role, std::string>* found = nullptr;
  for (const auto& [token, who] : tokens_) {  // all of them, whichever matches
    if (SameSecret(token, given)) found = &who;
  }
  if (found == nullptr) return UnauthenticatedError("unknown token");
  const Role have = found->first;
  // Admin covers what people do (JobService), never the WorkerService: a worker is its own
  // principal.
  if (have == needed || (have == Role::kAdmin && needed == Role::kViewer)) return OkStatus();
  static const char* kNames[] = {"none", "viewer", "worker", "admin"};
  return PermissionDeniedError("token '" + found->second + "' has role " +
                               kNames[static_cast<int>(have)] + "; this call needs " +
                               kNames[static_cast<int>(needed)]);
}

std::string TokenAuth::Who(const std::string& authorization) const {
  const std::string prefix = "Bearer ";
  if (!enabled_ || authorization.rfind(prefix, 0) != 0) return "";
  const std::string_view given = std::string_view(authorization).substr(prefix.size());
  std::string who;
  for (const auto& [token, entry] : tokens_) {
    if (SameSecret(token, given)) who = entry.second;
  }
  return who;
}

}  // namespace moe::controller
