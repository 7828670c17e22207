#include "common/rank_end.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <utility>

namespace moe {
namespace {

constexpr std::array<std::pair<FailureClass, std::string_view>, 4> kClassNames = {{
    {FailureClass::kNone, "none"},
    {FailureClass::kStopped, "stopped"},
    {FailureClass::kTransient, "transient"},
    {FailureClass::kPermanent, "permanent"},
}};

bool ParseStatusCode(std::string_view name, StatusCode* out) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == name) {
      *out = static_cast<StatusCode>(c);
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view FailureClassName(FailureClass c) {
  for (const auto& [k, name] : kClassNames) {
    if (k == c) return name;
  }
  return "unknown";
}

bool ParseFailureClass(std::string_view name, FailureClass* out) {
  for (const auto& [k, n] : kClassNames) {
    if (n == name) {
      *out = k;
      return true;
    }
  }
  return false;
}

int RankEnd::exit_code() const {
  switch (failure_class) {
    case FailureClass::kNone:
      return kExitOk;
    case FailureClass::kStopped:
      return kExitStopped;
    case FailureClass::kPermanent:
      return code == StatusCode::kInvalidArgument ? kExitBadInput : kExitCannotRun;
    case FailureClass::kTransient:
      break;
  }
  return kExitTransient;
}

RankEnd RankEndFor(const Status& st) {
  RankEnd end;
  end.code = st.code();
  end.message = st.message();
  switch (st.code()) {
    case StatusCode::kOk:
      end.failure_class = FailureClass::kNone;
      break;
    case StatusCode::kCancelled:
      end.failure_class = FailureClass::kStopped;
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
      end.failure_class = FailureClass::kPermanent;
      break;
    default:
      end.failure_class = FailureClass::kTransient;
      break;
  }
  return end;
}

RankEnd StoppedRankEnd(std::string message) {
  return RankEndFor(Status(StatusCode::kCancelled, std::move(message)));
}

RankEnd RankEndForExitCode(int exit_code, std::string message) {
  switch (exit_code) {
    case kExitOk:
      return RankEnd{};
    case kExitBadInput:
      return RankEndFor(InvalidArgumentError(std::move(message)));
    case kExitStopped:
      return StoppedRankEnd(std::move(message));
    case kExitCannotRun:
      return RankEndFor(FailedPreconditionError(std::move(message)));
    default:
      return RankEndFor(UnavailableError(std::move(message)));
  }
}

std::string RankEndJson(const RankEnd& end) {
  Node n = Node::Map();
  n.Set("end", Node::Scalar("true"));
  n.Set("code", Node::Scalar(std::string(StatusCodeName(end.code)), true));
  n.Set("class", Node::Scalar(std::string(FailureClassName(end.failure_class)), true));
  n.Set("exit_code", Node::Scalar(std::to_string(end.exit_code())));
  n.Set("message", Node::Scalar(end.message, true));
  if (end.checkpoint_step > 0)
    n.Set("checkpoint_step", Node::Scalar(std::to_string(end.checkpoint_step)));
  return ToJson(n);
}

StatusOr<RankEnd> ParseRankEnd(const Node& doc) {
  const Node* flag = doc.IsMap() ? doc.Find("end") : nullptr;
  if (flag == nullptr) return NotFoundError("not a final record");
  RankEnd end;
  const Node* code = doc.Find("code");
  const Node* cls = doc.Find("class");
  if (code == nullptr || !ParseStatusCode(code->scalar(), &end.code)) {
    return InvalidArgumentError("final record: unknown status code '" +
                                (code ? code->scalar() : "") + "'");
  }
  if (cls == nullptr || !ParseFailureClass(cls->scalar(), &end.failure_class)) {
    return InvalidArgumentError("final record: unknown failure class '" +
                                (cls ? cls->scalar() : "") + "'");
  }
  if (const Node* m = doc.Find("message")) end.message = m->scalar();
  if (const Node* c = doc.Find("checkpoint_step")) {
    // Informational: a record without a readable step still says how the rank ended.
    try {
      end.checkpoint_step = std::max<int64_t>(0, std::stoll(c->scalar()));
    } catch (const std::exception&) {
      end.checkpoint_step = 0;
    }
  }
  return end;
}

}  // namespace moe
