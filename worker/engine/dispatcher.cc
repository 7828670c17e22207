#include "worker/engine/dispatcher.h"

#include <chrono>

#include "kernels/elementwise.h"
#include "kernels/memory_stats.h"

namespace moe {

TokenDispatcher::TokenDispatcher(Communicator* ep_group, int64_t num_experts, double* alltoall_seconds)
    : comm_(ep_group), num_experts_(num_experts), alltoall_seconds_(alltoall_seconds) {
  if (comm_ != nullptr) {
    group_size_ = comm_->size();
    rank_ = comm_->rank();
  }
  MOE_CHECK(num_experts_ % group_size_ == 0) << num_experts_ << " experts over an EP group of " << group_size_;
}

Status TokenDispatcher::Exchange(const Tensor& send, const std::vector<int64_t>& send_rows, const Tensor& recv,
                                 const std::vector<int64_t>& recv_rows) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = comm_->AllToAllV(send, send_rows, recv, recv_rows);
  if (alltoall_seconds_ != nullptr) {
    *alltoall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return st;
}

StatusOr<Tensor> TokenDispatcher::Dispatch(const Tensor& xp, const std::vector<int64_t>& counts, Route* route) {
  MOE_CHECK(static_cast<int64_t>(counts.size()) == num_experts_) << "counts for " << counts.size() << " experts";
  const int64_t p = group_size_, el = local_experts();
  if (p == 1) {
    route->send_rows = route->recv_rows = {xp.dim(0)};
    route->local_offsets.assign(static_cast<size_t>(el) + 1, 0);
    for (int64_t e = 0; e < el; ++e) route->local_offsets[static_cast<size_t>(e) + 1] = route->local_offsets[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
    route->segments = route->local_offsets;
    route->local_rows = xp.dim(0);
    return xp;
  }
  // 1. Counts: block r tells rank r how many rows of each of its experts come from here.
  std::vector<int64_t> recv_counts(static_cast<size_t>(p * el));
  const auto t0 = std::chrono::steady_clock::now();
  MOE_RETURN_IF_ERROR(comm_->AllToAllHost(counts.data(), recv_counts.data(), el));
  if (alltoall_seconds_ != nullptr) {
    *alltoall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  route->send_rows.assign(static_cast<size_t>(p), 0);
  route->recv_rows.assign(static_cast<size_t>(p), 0);
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t e = 0; e < el; ++e) {
      route->send_rows[static_cast<size_t>(r)] += counts[static_cast<size_t>(r * el + e)];
      route->recv_rows[static_cast<size_t>(r)] += recv_counts[static_cast<size_t>(r * el + e)];
    }
  }
  int64_t total = 0;
  std::vector<int64_t> src_offset(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) { src_offset[static_cast<size_t>(r)] = total; total += route->recv_rows[static_cast<size_t>(r)]; }
  route->local_rows = total;
  // 2. Regrouping: received rows are [source rank][local expert]; experts want [local expert][source].
  std::vector<int32_t> regroup(static_cast<size_t>(total)), ungroup(static_cast<size_t>(total));
  route->local_offsets.assign(static_cast<size_t>(el) + 1, 0);
  route->segments.assign(1, 0);
  int64_t out = 0;
  for (int64_t e = 0; e < el; ++e) {
    for (int64_t r = 0; r < p; ++r) {
      int64_t start = src_offset[static_cast<size_t>(r)];
      for (int64_t e2 = 0; e2 < e; ++e2) start += recv_counts[static_cast<size_t>(r * el + e2)];
      const int64_t n = recv_counts[static_cast<size_t>(r * el + e)];
      for (int64_t i = 0; i < n; ++i) {
        regroup[static_cast<size_t>(out)] = static_cast<int32_t>(start + i);
        ungroup[static_cast<size_t>(start + i)] = static_cast<int32_t>(out);
        ++out;
      }
      route->segments.push_back(out);
    }
    route->local_offsets[static_cast<size_t>(e) + 1] = out;
  }
  const Device dev = xp.device();
  const int64_t n_idx = std::max<int64_t>(total, 1);  // tensors need a non-zero size to be defined
  regroup.resize(static_cast<size_t>(n_idx), 0);
  ungroup.resize(static_cast<size_t>(n_idx), 0);
  route->regroup = Tensor::FromVector(regroup, {n_idx}).Clone(dev).Rows(0, total);
  route->ungroup = Tensor::FromVector(ungroup, {n_idx}).Clone(dev).Rows(0, total);
  return Forward(xp, *route);
}

StatusOr<Tensor> TokenDispatcher::Forward(const Tensor& rows, const Route& route) {
  if (group_size_ == 1) return rows;
  const int64_t h = rows.dim(1);
  Tensor recv;
  {
    MemoryScope staging(MemoryCategory::kCommunication);
    recv = Tensor::Empty({route.local_rows, h}, rows.dtype(), rows.device());
  }
  MOE_RETURN_IF_ERROR(Exchange(rows, route.send_rows, recv, route.recv_rows));
  Tensor local = Tensor::Empty({route.local_rows, h}, rows.dtype(), rows.device());
  if (route.local_rows > 0) kernels::GatherRows(recv, route.regroup, local);
  return local;
}

StatusOr<Tensor> TokenDispatcher::Combine(const Tensor& y_local, const Route& route) {
  if (group_size_ == 1) return y_local;
  const int64_t h = y_local.dim(1);
  Tensor back;
  {
    MemoryScope staging(MemoryCategory::kCommunication);
    back = Tensor::Empty({route.local_rows, h}, y_local.dtype(), y_local.device());
  }
  if (route.local_rows > 0) kernels::GatherRows(y_local, route.ungroup, back);
  int64_t sent = 0;
  for (int64_t n : route.send_rows) sent += n;
  Tensor out = Tensor::Empty({sent, h}, y_local.dtype(), y_local.device());
  MOE_RETURN_IF_ERROR(Exchange(back, route.recv_rows, out, route.send_rows));
  return out;
}

}  // namespace moe
