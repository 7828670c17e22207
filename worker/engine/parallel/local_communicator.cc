#include "worker/engine/parallel/local_communicator.h"

#include <cstring>

#include "worker/engine/parallel/collective_args.h"

namespace moe::parallel {

Status LocalCommunicator::AllToAllV(const Tensor& send, const std::vector<int64_t>& send_rows,
                                    const Tensor& recv, const std::vector<int64_t>& recv_rows) {
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

// On one rank the ranges are the whole tensor: nothing moves, but bad arguments are refused as on
// every backend, so a caller's mistake shows at W = 1 too.
Status LocalCommunicator::ReduceScatterSum(const Tensor& t, const std::vector<int64_t>& counts) {
  const std::string where = Where("reduce_scatter");
  MOE_RETURN_IF_ERROR(CheckSumDType(t, where));
  return CheckRanges(t, counts, 1, where);
}

Status LocalCommunicator::AllGather(const Tensor& t, const std::vector<int64_t>& counts) {
  return CheckRanges(t, counts, 1, Where("all_gather"));
}

Status LocalCommunicator::Exchange(const std::vector<P2POp>& ops) {
  MOE_RETURN_IF_ERROR(CheckP2P(ops, 0, 1, Where("exchange")));
  ExchangeWithSelf(ops, 0);
  return OkStatus();
}

}  // namespace moe::parallel
