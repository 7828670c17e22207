// How a rank's process ends: the one place that defines moe-train's exit codes, the failure classes
// the controller acts on, and the final record a rank writes at the end of its report stream.
//
// A rank (moe-train in rank mode) writes one JSON line per step on its report fd, then one final
// record:
//   {"end":true,"code":"FAILED_PRECONDITION","class":"permanent","exit_code":4,"message":"..."}
// Whoever started it (the worker agent, moe-train --nproc) reads the record instead of guessing
// from exit codes or searching the output. A process that dies without one (a crash, SIGKILL) ended
// transiently: a restart may help.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/yaml.h"

namespace moe {

// What the one who started the rank should do about its end.
enum class FailureClass {
  kNone,       // it succeeded
  kStopped,    // it stopped because it was asked to (SIGTERM, cancel, drain)
  kTransient,  // a retry may work: a lost peer, a timeout, a crash
  kPermanent,  // the job cannot run as specified: a retry fails the same way
};

std::string_view FailureClassName(FailureClass c);  // "none", "stopped", "transient", "permanent"
bool ParseFailureClass(std::string_view name, FailureClass* out);

// moe-train's exit codes (docs/operations.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitTransient = 1;  // a failure a retry may fix
inline constexpr int kExitBadInput = 2;   // bad flags or job file
inline constexpr int kExitStopped = 3;    // stopped on request
inline constexpr int kExitCannotRun =
    4;  // the job cannot run as specified here (layout, vocabulary, device)

struct RankEnd {
  StatusCode code = StatusCode::kOk;
  FailureClass failure_class = FailureClass::kNone;
  std::string message;
  int64_t checkpoint_step = 0;  // the newest checkpoint the rank wrote or resumed from (0: none)

  bool ok() const { return failure_class == FailureClass::kNone; }
  int exit_code() const;
};

// The end of a rank that returned `st` (OK: success). INVALID_ARGUMENT and FAILED_PRECONDITION are
// permanent; CANCELLED is a stop on request; anything else is transient.
RankEnd RankEndFor(const Status& st);
RankEnd StoppedRankEnd(std::string message);
// The end an exit code stands for (the inverse of RankEnd::exit_code, for a process that sent no
// record).
RankEnd RankEndForExitCode(int exit_code, std::string message);

// The record as one JSON line (no newline), and back. ParseRankEnd returns NOT_FOUND for a line
// that is not a final record (a step report).
std::string RankEndJson(const RankEnd& end);
StatusOr<RankEnd> ParseRankEnd(const Node& doc);

}  // namespace moe
