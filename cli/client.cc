#include "cli/client.h"

#include <chrono>
#include <cstdio>

#include "common/escape.h"
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

}  // namespace moe::cli
