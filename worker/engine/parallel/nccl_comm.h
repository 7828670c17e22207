// The Nccl backend of the communicators (GPU: nccl_comm.cc, built where CUDA and NCCL are; without
// it the factory fails with FAILED_PRECONDITION and HaveNccl is false: process_group.cc).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/engine/parallel/communicator.h"
#include "worker/engine/parallel/store.h"

namespace moe::parallel {

// Creates a communicator among `size` ranks that all call it with the same store prefix.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(int rank, int size, KvStore* store,
                                                               const GroupOptions& options);
bool HaveNccl();
// The NCCL this process runs ("2.28.3", from ncclGetVersion), "" in a build without NCCL.
std::string NcclVersion();

}  // namespace moe::parallel
