// Argument checks and helpers shared by the communicators (Local, Gloo, NCCL), so that each backend
// refuses the same bad calls with the same words and the layouts of ZeRO ranges and point-to-point
// batches are computed in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"
#include "worker/engine/parallel/communicator.h"

namespace moe::parallel {

// Start of every rank's range: offsets[r] = counts[0] + ... + counts[r - 1] (counts.size() + 1
// entries, the last one the total).
std::vector<int64_t> RangeOffsets(const std::vector<int64_t>& counts);

// The ranges of ReduceScatterSum / AllGather: t defined, one count per rank of the group, none
// negative, summing to t's numel. `where` (Communicator::Where) prefixes the error.
Status CheckRanges(const Tensor& t, const std::vector<int64_t>& counts, int group_size,
                   const std::string& where);

// Sums are taken in f32 or f64 (gradients and master weights are fp32; bf16 is not summed on the
// wire).
Status CheckSumDType(const Tensor& t, const std::string& where);

// Every tensor of a call is on the communicator's kind of device (host for Gloo, CUDA for NCCL).
Status CheckDevice(const Tensor& t, bool want_cuda, const std::string& where);

// An Exchange batch: tensors defined, peers in the group, and the sends to this rank pairing up in
// order with its receives from itself (same dtype and numel).
Status CheckP2P(const std::vector<P2POp>& ops, int rank, int group_size, const std::string& where);

// Copies the k-th send to `rank` (oneself) into the k-th receive from `rank` (CheckP2P passed).
void ExchangeWithSelf(const std::vector<P2POp>& ops, int rank);

// "send of 4096 bytes to rank 1" (for errors).
std::string DescribeP2P(const P2POp& op);
// The whole batch, the first few ops: "send of 4096 bytes to rank 1, recv of 4096 bytes from rank
// 3".
std::string DescribeBatch(const std::vector<P2POp>& ops);

}  // namespace moe::parallel
