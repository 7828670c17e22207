// The Gloo backend of the communicators (CPU over TCP: gloo_comm.cc, built where Gloo is; without
// it the factory fails with FAILED_PRECONDITION and HaveGloo is false: process_group.cc).
#pragma once

#include <memory>

#include "common/status.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/store.h"

namespace moe::parallel {

// Creates a communicator among `size` ranks that all call it with the same store prefix.
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options);
bool HaveGloo();

}  // namespace moe::parallel
