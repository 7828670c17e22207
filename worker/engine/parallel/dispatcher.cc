#include "worker/engine/parallel/dispatcher.h"

#include "kernels/elementwise.h"
#include "kernels/memory_stats.h"

namespace moe::parallel {

TokenDispatcher::TokenDispatcher(Communicator* ep_group, int64_t num_experts, PhaseTimer* phases)
    : comm_(ep_group), num_experts_(num_experts), phases_(phases) {
  if (comm_ != nullptr) {
    group_size_ = comm_->size();
    rank_ = comm_->rank();
  }
  MOE_CHECK(num_experts_ % group_size_ == 0)
      << num_experts_ << " experts over an EP group of " << group_size_;
}

Pending TokenDispatcher::StartExchange(const Tensor& send, const std::vector<int64_t>& send_rows,
                                       const Tensor& recv, const std::vector<int64_t>& recv_rows) {
  PhaseSpan span(phases_, PhaseTimer::kAllToAll);
  return comm_->StartAllToAllV(send, send_rows, recv, recv_rows);
}

// The route from the counts: rows to and from each rank, and the regrouping of what arrives
// ([source rank][local expert]) by local expert ([local expert][source rank]) for the grouped
// GEMMs.
void TokenDispatcher::MakeRoute(const std::vector<int64_t>& counts,
                                const std::vector<int64_t>& recv_counts, Route* route) const {
  const int64_t p = group_size_, el = local_experts();
  const auto at = [](int64_t i) { return static_cast<size_t>(i); };
  route->send_rows.assign(at(p), 0);
  route->recv_rows.assign(at(p), 0);
  for (int64_t r = 0; r < p; ++r) {
    for (int64_t e = 0; e < el; ++e) {
      route->send_rows[at(r)] += counts[at(r * el + e)];
      route->recv_rows[at(r)] += recv_counts[at(r * el + e)];
    }
  }
  int64_t total = 0;
  std::vector<int64_t> src_offset(at(p));
  for (int64_t r = 0; r < p; ++r) {
    src_offset[at(r)] = total;
    total += route->recv_rows[at(r)];
  }
  route->local_rows = total;
  std::vector<int32_t> regroup(at(total)), ungroup(at(total));
  route->local_offsets.assign(at(el) + 1, 0);
  route->segments.assign(1, 0);
  int64_t out = 0;
  for (int64_t e = 0; e < el; ++e) {
    for (int64_t r = 0; r < p; ++r) {
      int64_t start = src_offset[at(r)];
      for (int64_t e2 = 0; e2 < e; ++e2) start += recv_counts[at(r * el + e2)];
      const int64_t n = recv_counts[at(r * el + e)];
      for (int64_t i = 0; i < n; ++i) {
        regroup[at(out)] = static_cast<int32_t>(start + i);
        ungroup[at(start + i)] = static_cast<int32_t>(out);
        ++out;
      }
      route->segments.push_back(out);
    }
    route->local_offsets[at(e) + 1] = out;
  }
  const int64_t n_idx = std::max<int64_t>(total, 1);  // tensors need a non-zero size to be defined
  regroup.resize(at(n_idx), 0);
  ungroup.resize(at(n_idx), 0);
  route->regroup = Tensor::FromVector(regroup, {n_idx});
  route->ungroup = Tensor::FromVector(ungroup, {n_idx});
}

Status TokenDispatcher::DispatchStart(const Tensor& xp, const std::vector<int64_t>& counts,
                                      Route* route, InFlight* f) {
  MOE_CHECK(static_cast<int64_t>(counts.size()) == num_experts_)
      << "counts for " << counts.size() << " experts";
  const int64_t p = group_size_, el = local_experts();
  if (p == 1) {
    route->send_rows = route->recv_rows = {xp.dim(0)};
    route->local_offsets.assign(static_cast<size_t>(el) + 1, 0);
    for (int64_t e = 0; e < el; ++e)
      route->local_offsets[static_cast<size_t>(e) + 1] =
          route->local_offsets[static_cast<size_t>(e)] + counts[static_cast<size_t>(e)];
    route->segments = route->local_offsets;
    route->local_rows = xp.dim(0);
    return Send(xp, *route, f);
  }
  // Counts first: block r tells rank r how many rows of each of its experts come from here.
  std::vector<int64_t> recv_counts(static_cast<size_t>(p * el));
  {
    PhaseSpan span(phases_, PhaseTimer::kAllToAll);
    MOE_RETURN_IF_ERROR(comm_->AllToAllHost(counts.data(), recv_counts.data(), el));
  }
  MakeRoute(counts, recv_counts, route);
  const Device dev = xp.device();
  route->regroup = route->regroup.Clone(dev).Rows(0, route->local_rows);
  route->ungroup = route->ungroup.Clone(dev).Rows(0, route->local_rows);
  return Send(xp, *route, f);
}

bool TokenDispatcher::StaysHere(const Tensor& rows, InFlight* f) const {
  f->op.reset();
  f->regroup = false;
  if (group_size_ == 1) f->rows = rows;
  return group_size_ == 1;
}

Status TokenDispatcher::Send(const Tensor& rows, const Route& route, InFlight* f) {
  if (StaysHere(rows, f)) return OkStatus();
  {
    MemoryScope staging(MemoryCategory::kCommunication);
    f->rows = Tensor::Empty({route.local_rows, rows.dim(1)}, rows.dtype(), rows.device());
  }
  f->op = StartExchange(rows, route.send_rows, f->rows, route.recv_rows);
  f->regroup = true;
  return OkStatus();
}

Status TokenDispatcher::CombineStart(const Tensor& y_local, const Route& route, InFlight* f) {
  if (StaysHere(y_local, f)) return OkStatus();
  const int64_t h = y_local.dim(1);
  Tensor back;
  {
    MemoryScope staging(MemoryCategory::kCommunication);
    back = Tensor::Empty({route.local_rows, h}, y_local.dtype(), y_local.device());
  }
  if (route.local_rows > 0) kernels::GatherRows(y_local, route.ungroup, back);
  int64_t sent = 0;
  for (int64_t n : route.send_rows) sent += n;
  f->rows = Tensor::Empty({sent, h}, y_local.dtype(), y_local.device());
  f->op = StartExchange(back, route.recv_rows, f->rows, route.send_rows);
  return OkStatus();
}

StatusOr<Tensor> TokenDispatcher::Finish(InFlight* f, const Route& route) {
  if (f->op) {
    Status st;
    {
      PhaseSpan span(phases_, PhaseTimer::kAllToAll);
      st = f->op->Wait();
      f->op.reset();
    }
    MOE_RETURN_IF_ERROR(st);
  }
  Tensor rows = std::move(f->rows);
  if (!f->regroup) return rows;
  Tensor local = Tensor::Empty({route.local_rows, rows.dim(1)}, rows.dtype(), rows.device());
  if (route.local_rows > 0) kernels::GatherRows(rows, route.regroup, local);
  return local;
}

}  // namespace moe::parallel
