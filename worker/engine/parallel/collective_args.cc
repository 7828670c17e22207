#include "worker/engine/parallel/collective_args.h"

namespace moe::parallel {

namespace {

class FinishedCollective final : public PendingCollective {
 public:
  explicit FinishedCollective(Status status) : status_(std::move(status)) {}
  Status Wait() override { return status_; }

 private:
  Status status_;
};

}  // namespace

Pending Finished(Status status) { return std::make_unique<FinishedCollective>(std::move(status)); }

std::string Communicator::Where(const std::string& op) const {
  return (phase_.empty() ? std::string() : phase_ + ": ") + op + " over " + backend() + " (rank " +
         std::to_string(rank()) + " of a group of " + std::to_string(size()) + ")";
}

std::vector<int64_t> RangeOffsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r];
  return offsets;
}

Status CheckRanges(const Tensor& t, const std::vector<int64_t>& counts, int group_size,
                   const std::string& where) {
  if (!t.defined()) return InvalidArgumentError(where + ": the tensor is undefined");
  if (static_cast<int>(counts.size()) != group_size) {
    return InvalidArgumentError(where + ": counts has " + std::to_string(counts.size()) +
                                " entries for a group of " + std::to_string(group_size) + " ranks");
  }
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return InvalidArgumentError(where + ": counts[" + std::to_string(r) + "] is negative (" +
                                  std::to_string(counts[r]) + ")");
    }
    total += counts[r];
  }
  if (total != t.numel()) {
    return InvalidArgumentError(where + ": counts sum to " + std::to_string(total) +
                                " elements but the tensor " + t.ShapeString() + " has " +
                                std::to_string(t.numel()));
  }
  return OkStatus();
}

Status CheckSumDType(const Tensor& t, const std::string& where) {
  if (t.defined() && (t.dtype() == DType::kF32 || t.dtype() == DType::kF64)) return OkStatus();
  return InvalidArgumentError(
      where + ": sums f32 or f64 tensors (gradients are kept in fp32), got " +
      (t.defined() ? std::string(DTypeName(t.dtype())) : std::string("an undefined tensor")));
}

Status CheckDevice(const Tensor& t, bool want_cuda, const std::string& where) {
  if (!t.defined() || t.device().is_cuda() == want_cuda) return OkStatus();
  return InvalidArgumentError(where + ": moves " + (want_cuda ? "CUDA" : "host") +
                              " tensors only, got one on " + t.device().ToString());
}

Status CheckP2P(const std::vector<P2POp>& ops, int rank, int group_size, const std::string& where) {
  std::vector<const P2POp*> self_sends, self_recvs;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const std::string which =
        where + ": op " + std::to_string(i) + " (" + (op.kind == P2POp::kSend ? "send" : "recv");
    if (!op.tensor.defined()) return InvalidArgumentError(which + "): the tensor is undefined");
    if (op.peer < 0 || op.peer >= group_size) {
      return InvalidArgumentError(which + "): peer " + std::to_string(op.peer) +
                                  " is not a rank of a group of " + std::to_string(group_size));
    }
    if (op.peer == rank) (op.kind == P2POp::kSend ? self_sends : self_recvs).push_back(&op);
  }
  if (self_sends.size() != self_recvs.size()) {
    return InvalidArgumentError(
        where + ": " + std::to_string(self_sends.size()) + " sends to this rank itself but " +
        std::to_string(self_recvs.size()) + " receives from it in the batch");
  }
  for (size_t k = 0; k < self_sends.size(); ++k) {
    const Tensor &s = self_sends[k]->tensor, &r = self_recvs[k]->tensor;
    if (s.dtype() != r.dtype() || s.numel() != r.numel()) {
      return InvalidArgumentError(where + ": send " + std::to_string(k) + " to itself is " +
                                  DTypeName(s.dtype()) + s.ShapeString() + " but its receive is " +
                                  DTypeName(r.dtype()) + r.ShapeString());
    }
  }
  return OkStatus();
}

void ExchangeWithSelf(const std::vector<P2POp>& ops, int rank) {
  std::vector<const Tensor*> sends;
  for (const P2POp& op : ops) {
    if (op.peer == rank && op.kind == P2POp::kSend) sends.push_back(&op.tensor);
  }
  size_t k = 0;
  for (const P2POp& op : ops) {
    if (op.peer == rank && op.kind == P2POp::kRecv) op.tensor.CopyFrom(*sends[k++]);
  }
}

std::string DescribeP2P(const P2POp& op) {
  return std::string(op.kind == P2POp::kSend ? "send of " : "recv of ") +
         std::to_string(op.tensor.nbytes()) + " bytes " +
         (op.kind == P2POp::kSend ? "to" : "from") + " rank " + std::to_string(op.peer);
}

std::string DescribeBatch(const std::vector<P2POp>& ops) {
  constexpr size_t kShown = 4;
  std::string s;
  for (size_t i = 0; i < ops.size() && i < kShown; ++i) s += (i ? ", " : "") + DescribeP2P(ops[i]);
  if (ops.size() > kShown) s += " and " + std::to_string(ops.size() - kShown) + " more";
  return s;
}

}  // namespace moe::parallel
