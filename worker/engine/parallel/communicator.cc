// What a rank does when a collective fails where no caller waits.
#include "worker/engine/parallel/communicator.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "common/rank_end.h"

namespace moe::parallel {
namespace {

[[noreturn]] void PrintAndExit(const Status& failure) {
  std::fprintf(stderr, "moe-train: a collective failed: %s\n", failure.ToString().c_str());
  std::fflush(stderr);
  ::_exit(kExitTransient);
}

std::atomic<CollectiveFailureHandler> g_failure_handler{&PrintAndExit};

}  // namespace

void SetCollectiveFailureHandler(CollectiveFailureHandler handler) {
  g_failure_handler.store(handler != nullptr ? handler : &PrintAndExit);
}

void OnCollectiveFailure(const Status& failure) {
  g_failure_handler.load()(failure);
  PrintAndExit(failure);
}

}  // namespace moe::parallel
