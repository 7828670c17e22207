// Job states that are facts, with one home: the controller, its watch stream and moectl all ask
// here (they decided it three times and disagreed on INVALID).
#pragma once

#include "moe/v1/job.pb.h"

namespace moe {

// A job that will never run again: SUCCEEDED, FAILED, CANCELLED, TIMEOUT, or INVALID (its stored
// spec no longer validates: it cannot run). A watch ends at such a state, `moectl delete` selects
// such jobs and `moectl cancel` the others.
inline bool IsTerminal(moe::v1::JobState s) {
  return s == moe::v1::SUCCEEDED || s == moe::v1::FAILED || s == moe::v1::CANCELLED ||
         s == moe::v1::TIMEOUT || s == moe::v1::INVALID;
}

}  // namespace moe
