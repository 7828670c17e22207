#include "cli/client.h"

#include <google/protobuf/util/json_util.h>

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

StatusOr<std::string> ToJsonText(const google::protobuf::Message& m, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  const auto st = google::protobuf::util::MessageToJsonString(m, &out, o);
  if (!st.ok())
    return InternalError("printing " + m.GetTypeName() + " as JSON: " + std::string(st.message()));
  return out;
}

StatusOr<std::string> ToYamlText(const google::protobuf::Message& m) {
  MOE_ASSIGN_OR_RETURN(std::string json, ToJsonText(m, false));
  MOE_ASSIGN_OR_RETURN(Node doc, ParseYaml(json));
  return ToYaml(doc);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace moe::cli
