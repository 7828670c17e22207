#include "common/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code_, std::string(prefix) + ": " + message_);
}

Status ErrnoError(std::string_view what, int err) {
  StatusCode code = StatusCode::kUnknown;
  switch (err) {
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EACCES:
    case EPERM:
      code = StatusCode::kPermissionDenied;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case ENOSPC:
      code = StatusCode::kResourceExhausted;
      break;
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    default:
      code = StatusCode::kUnavailable;
      break;
  }
  return Status(code, std::string(what) + ": " + std::strerror(err));
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

void DieOkStatusInStatusOr() {
  std::fprintf(stderr, "fatal: StatusOr constructed from an OK status\n");
  std::abort();
}

}  // namespace moe
