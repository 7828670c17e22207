#include <cstring>

#include "worker/engine/comm/communicator.h"

namespace moe {

Status LocalCommunicator::AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                                    const std::vector<int64_t>& recv_rows) {
  if (send_rows.size() != 1 || recv_rows.size() != 1 || send_rows[0] != recv_rows[0]) {
    return InvalidArgumentError("all_to_all_v on one rank: send and receive counts must match");
  }
  if (send_rows[0] > 0) recv.Rows(0, recv_rows[0]).CopyFrom(send.Rows(0, send_rows[0]));
  return OkStatus();
}

Status LocalCommunicator::AllToAllHost(const int64_t* send, int64_t* recv, int64_t n_per_rank) {
  std::memcpy(recv, send, sizeof(int64_t) * static_cast<size_t>(n_per_rank));
  return OkStatus();
}

Status LocalCommunicator::AllGatherHost(const void* send, void* recv, size_t bytes) {
  std::memcpy(recv, send, bytes);
  return OkStatus();
}

}  // namespace moe
