// What the trainer's parts (trainer.cc, trainer_setup.cc, trainer_checkpoint.cc) share and nothing
// else uses.
#pragma once

#include <chrono>

namespace moe::train::internal {

using Clock = std::chrono::steady_clock;

// Seconds since `t`.
inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace moe::train::internal
