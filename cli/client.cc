#include "cli/client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/escape.h"
#include "common/file_util.h"
#include "common/yaml.h"

namespace moe::cli {

int ExitCodeFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return 3;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return 4;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return 5;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
      return 6;
    default:
      return 1;
  }
}

Status Client::Connect() {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, MakeChannel(options));
  stub = moe::v1::JobService::NewStub(channel);
  return OkStatus();
}

bool Client::FollowLeader(const Status& st, std::chrono::steady_clock::time_point until) {
  const size_t n = ControllerAddresses(options.address).size();
  if (n < 2 || st.code() != StatusCode::kUnavailable) return false;
  // Nothing was done: a standby refused it, or gRPC made no connection (its own text, at the
  // start: a controller's error that quotes a connect failure of its own, etcd's, may have been
  // applied, and is not sent again).
  const bool not_sent =
      IsStandbyRefusal(st) || st.message().rfind("failed to connect to all addresses", 0) == 0;
  if (!not_sent || std::chrono::steady_clock::now() >= until) return false;
  ++options.address_turn;
  if (!Connect().ok()) return false;
  // A whole round of refusals: an election under way; a breath before the next.
  if (options.address_turn % n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return true;
}

int Client::Fail(const Status& st) const {
  // The message may quote what others sent (names, paths): escaped, as every table is.
  const std::string msg =
      EscapeControl(st.message(), /*keep_newlines=*/true) + ConnectionHint(st, options);
  std::fprintf(stderr, "moectl: %s: %s\n", std::string(StatusCodeName(st.code())).c_str(),
               msg.c_str());
  return ExitCodeFor(st);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The config file moectl reads: "" when none is named and the default is absent.
StatusOr<std::string> ConfigPath() {
  if (std::string named = Env("MOE_CONFIG"); !named.empty()) {
    if (!PathExists(named))
      return NotFoundError("$MOE_CONFIG names " + named + ", which does not exist");
    return named;
  }
  std::string base = Env("XDG_CONFIG_HOME");
  if (base.empty() && !Env("HOME").empty()) base = Env("HOME") + "/.config";
  if (base.empty()) return std::string();
  const std::string path = base + "/moectl/config.yaml";
  return PathExists(path) ? path : std::string();
}

Status ReadConfig(const std::string& path, Client* c, std::string* token_file) {
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  StatusOr<Node> doc = ParseYaml(text);
  if (!doc.ok()) return InvalidArgumentError(path + ": " + doc.status().message());
  if (!doc->IsMap()) return InvalidArgumentError(path + ": a map of settings (controller: ...)");
  std::map<std::string, std::string*> text_keys = {{"controller", &c->options.address},
                                                   {"token_file", token_file},
                                                   {"tls_ca", &c->options.tls_ca},
                                                   {"tls_cert", &c->options.tls_cert},
                                                   {"tls_key", &c->options.tls_key}};
  for (const auto& [key, value] : doc->items()) {
    const std::string where = path + ": " + key;
    if (key == "timeout") {
      MOE_ASSIGN_OR_RETURN(c->timeout, value.AsDouble(where));
      if (!(c->timeout > 0)) return InvalidArgumentError(where + ": must be > 0 seconds");
      continue;
    }
    auto it = text_keys.find(key);
    if (it == text_keys.end()) {
      return InvalidArgumentError(where +
                                  ": unknown key (controller, token_file, tls_ca, tls_cert, "
                                  "tls_key, timeout; a token itself is never kept in this file)");
    }
    MOE_ASSIGN_OR_RETURN(*it->second, value.AsString(where));
  }
  return OkStatus();
}

}  // namespace

Status LoadConnectionDefaults(Client* c, std::string* token_file, std::string* source) {
  c->options.address = "127.0.0.1:50051";
  MOE_ASSIGN_OR_RETURN(const std::string path, ConfigPath());
  if (!path.empty()) MOE_RETURN_IF_ERROR(ReadConfig(path, c, token_file));
  if (source) *source = path;
  const std::pair<const char*, std::string*> env[] = {
      {"MOE_CONTROLLER", &c->options.address}, {"MOE_TOKEN", &c->options.token},
      {"MOE_TOKEN_FILE", token_file},          {"MOE_TLS_CA", &c->options.tls_ca},
      {"MOE_TLS_CERT", &c->options.tls_cert},  {"MOE_TLS_KEY", &c->options.tls_key}};
  for (const auto& [name, out] : env) {
    if (std::string v = Env(name); !v.empty()) *out = v;
  }
  return OkStatus();
}

bool Reconnect::Retry(const Status& st) {
  // UNAVAILABLE: not reachable; CANCELLED: a call in flight when the controller shut down.
  if (st.code() != StatusCode::kUnavailable && st.code() != StatusCode::kCancelled) return false;
  const double now = NowSeconds();
  if (!lost_) {
    lost_ = true;
    lost_at_ = now;
    std::fprintf(stderr, "moectl: lost the controller (%s); reconnecting for up to %.0f s\n",
                 st.message().c_str(), give_up_);
  }
  if (now - lost_at_ > give_up_) return false;
  std::this_thread::sleep_for(std::chrono::duration<double>(backoff_));
  backoff_ = std::min(5.0, backoff_ * 2);
  return true;
}

void Reconnect::Reached() {
  if (lost_) {
    std::fprintf(stderr, "moectl: reconnected to the controller after %.1f s; resuming\n",
                 NowSeconds() - lost_at_);
  }
  lost_ = false;
  backoff_ = 0.5;
}

}  // namespace moe::cli
