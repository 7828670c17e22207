#include "worker/engine/parallel/pipeline_schedule.h"

#include <algorithm>

#include "common/check.h"

namespace moe::parallel {
namespace {

// Builds one rank's ops, tracking per chunk which micro-batch its next received input and output
// gradient belong to (each chunk runs its forwards, and its backwards, in micro-batch order).
class ScheduleBuilder {
 public:
  ScheduleBuilder(const PipelineShape& s, int rank)
      : p_(s.pipeline_parallel),
        v_(s.virtual_pipeline),
        m_(s.micro_batches),
        rank_(rank),
        next_input_(static_cast<size_t>(v_), 0),
        next_grad_(static_cast<size_t>(v_), 0) {}

  std::vector<PipelineOp> Build() {
    if (v_ == 1) {
      OneFOneB();
    } else {
      Interleaved();
    }
    return std::move(ops_);
  }

 private:
  bool FirstRank() const { return rank_ == 0; }
  bool LastRank() const { return rank_ == p_ - 1; }
  bool FirstStage(int chunk) const { return FirstRank() && chunk == 0; }
  bool LastStage(int chunk) const { return LastRank() && chunk == v_ - 1; }

  // Interleaved order: the k-th forward (backward) of this rank runs this chunk and micro-batch.
  int ChunkOf(int64_t k, bool forward) const {
    const int64_t group = static_cast<int64_t>(p_) * v_;
    const int c = static_cast<int>(((k % group) + group) % group / p_);
    return forward ? c : v_ - 1 - c;
  }
  int64_t MicroBatchOf(int64_t k) const {
    const int64_t group = static_cast<int64_t>(p_) * v_;
    return k / group * p_ + k % p_;
  }

  void Compute(PipelineOp::Kind kind, PipeRef r) {
    PipelineOp op;
    op.kind = kind;
    op.compute = r;
    ops_.push_back(op);
  }
  // One batched exchange: sends the given forward output / input gradient (when set), receives the
  // next input of `recv_input_chunk` / output gradient of `recv_grad_chunk` (when >= 0).
  void Exchange(std::optional<PipeRef> send_next, std::optional<PipeRef> send_prev,
                int recv_input_chunk, int recv_grad_chunk) {
    PipelineOp op;
    op.kind = PipelineOp::Kind::kExchange;
    if (send_next && !LastStage(send_next->chunk)) op.send_next = send_next;
    if (send_prev && !FirstStage(send_prev->chunk)) op.send_prev = send_prev;
    if (recv_input_chunk >= 0)
      op.recv_prev =
          PipeRef{recv_input_chunk, next_input_[static_cast<size_t>(recv_input_chunk)]++};
    if (recv_grad_chunk >= 0)
      op.recv_next = PipeRef{recv_grad_chunk, next_grad_[static_cast<size_t>(recv_grad_chunk)]++};
    if (op.send_next || op.send_prev || op.recv_prev || op.recv_next) ops_.push_back(op);
  }

  void OneFOneB();
  void Interleaved();
  void InterleavedWarmup(int64_t warmup, int64_t total, bool all_warmup);
  void InterleavedSteady(int64_t warmup, int64_t remaining);
  void InterleavedCooldown(int64_t remaining, int64_t total, bool all_warmup);

  const int p_, v_;
  const int64_t m_;
  const int rank_;
  std::vector<int64_t> next_input_, next_grad_;
  std::vector<PipelineOp> ops_;
};

// schedules.py: forward_backward_pipelining_without_interleaving.
void ScheduleBuilder::OneFOneB() {
  const int64_t warmup = std::min<int64_t>(p_ - rank_ - 1, m_), remaining = m_ - warmup;
  const int recv_input = FirstRank() ? -1 : 0, recv_grad = LastRank() ? -1 : 0;
  int64_t f = 0, b = 0;
  for (int64_t i = 0; i < warmup; ++i, ++f) {
    Exchange(std::nullopt, std::nullopt, recv_input, -1);
    Compute(PipelineOp::Kind::kForward, {0, f});
    Exchange(PipeRef{0, f}, std::nullopt, -1, -1);
  }
  if (remaining > 0) Exchange(std::nullopt, std::nullopt, recv_input, -1);
  for (int64_t i = 0; i < remaining; ++i, ++f, ++b) {
    Compute(PipelineOp::Kind::kForward, {0, f});
    Exchange(PipeRef{0, f}, std::nullopt, -1, recv_grad);  // send_forward_recv_backward
    Compute(PipelineOp::Kind::kBackward, {0, b});
    const bool last = i == remaining - 1;
    Exchange(std::nullopt, PipeRef{0, b}, last ? -1 : recv_input,
             -1);  // send_backward(_recv_forward)
  }
  for (int64_t i = 0; i < warmup; ++i, ++b) {
    Exchange(std::nullopt, std::nullopt, -1, recv_grad);
    Compute(PipelineOp::Kind::kBackward, {0, b});
    Exchange(std::nullopt, PipeRef{0, b}, -1, -1);
  }
}

// schedules.py: forward_backward_pipelining_with_interleaving (the variant without overlap).
void ScheduleBuilder::Interleaved() {
  const int64_t total = m_ * v_;
  const bool all_warmup = m_ == p_;
  const int64_t warmup =
      all_warmup ? total : std::min<int64_t>((p_ - rank_ - 1) * 2 + (v_ - 1) * p_, total);
  const int64_t remaining = total - warmup;
  if (!FirstRank()) Exchange(std::nullopt, std::nullopt, 0, -1);  // recv_forward for chunk 0
  InterleavedWarmup(warmup, total, all_warmup);
  InterleavedSteady(warmup, remaining);
  InterleavedCooldown(remaining, total, all_warmup);
}

void ScheduleBuilder::InterleavedWarmup(int64_t warmup, int64_t total, bool all_warmup) {
  for (int64_t k = 0; k < warmup; ++k) {
    const PipeRef fwd{ChunkOf(k, true), MicroBatchOf(k)};
    Compute(PipelineOp::Kind::kForward, fwd);
    const int next_chunk = ChunkOf(k + 1, true);
    bool recv_prev = !(FirstRank() && next_chunk == 0) && k != total - 1;
    if (k == warmup - 1 && !all_warmup) {
      const bool recv_next = !LastRank();
      Exchange(fwd, std::nullopt, recv_prev ? next_chunk : -1, recv_next ? v_ - 1 : -1);
    } else {
      Exchange(fwd, std::nullopt, recv_prev ? next_chunk : -1, -1);
    }
  }
}

void ScheduleBuilder::InterleavedSteady(int64_t warmup, int64_t remaining) {
  for (int64_t k = 0; k < remaining; ++k) {
    const int64_t fk = k + warmup, bk = k;
    const PipeRef fwd{ChunkOf(fk, true), MicroBatchOf(fk)};
    const PipeRef bwd{ChunkOf(bk, false), MicroBatchOf(bk)};
    Compute(PipelineOp::Kind::kForward, fwd);
    Compute(PipelineOp::Kind::kBackward, bwd);
    bool recv_prev = true;
    int next_fwd_chunk;
    if (FirstRank()) {
      next_fwd_chunk = ChunkOf(fk - (p_ - 1), true);
      if (next_fwd_chunk == v_ - 1) recv_prev = false;
      ++next_fwd_chunk;
    } else {
      next_fwd_chunk = ChunkOf(fk + 1, true);
    }
    bool recv_next = true;
    int next_bwd_chunk;
    if (LastRank()) {
      next_bwd_chunk = ChunkOf(bk - (p_ - 1), false);
      if (next_bwd_chunk == 0) recv_next = false;
      --next_bwd_chunk;
    } else {
      next_bwd_chunk = ChunkOf(bk + 1, false);
    }
    if (k == remaining - 1) recv_prev = false;
    Exchange(fwd, bwd, recv_prev ? next_fwd_chunk : -1, recv_next ? next_bwd_chunk : -1);
  }
}

void ScheduleBuilder::InterleavedCooldown(int64_t remaining, int64_t total, bool all_warmup) {
  if (all_warmup && !LastRank()) Exchange(std::nullopt, std::nullopt, -1, v_ - 1);
  for (int64_t k = remaining; k < total; ++k) {
    const PipeRef bwd{ChunkOf(k, false), MicroBatchOf(k)};
    Compute(PipelineOp::Kind::kBackward, bwd);
    const int next_chunk = ChunkOf(k + 1, false);
    const bool recv_next = !(LastRank() && next_chunk == v_ - 1) && k != total - 1;
    Exchange(std::nullopt, bwd, -1, recv_next ? next_chunk : -1);
  }
}

std::string RefString(const PipeRef& r) {
  return std::to_string(r.chunk) + "." + std::to_string(r.micro_batch);
}

}  // namespace

std::vector<PipelineOp> BuildPipelineSchedule(const PipelineShape& shape, int rank) {
  MOE_CHECK(shape.pipeline_parallel >= 1 && rank >= 0 && rank < shape.pipeline_parallel)
      << "rank " << rank;
  MOE_CHECK(shape.micro_batches >= 1 && shape.virtual_pipeline >= 1)
      << "micro-batches " << shape.micro_batches;
  MOE_CHECK(shape.virtual_pipeline == 1 || shape.micro_batches % shape.pipeline_parallel == 0)
      << "interleaving needs micro-batches (" << shape.micro_batches << ") divisible by PP ("
      << shape.pipeline_parallel << ")";
  return ScheduleBuilder(shape, rank).Build();
}

double IdealBubbleFraction(const PipelineShape& s) {
  const double p = s.pipeline_parallel, v = s.virtual_pipeline,
               m = static_cast<double>(s.micro_batches);
  return (p - 1) / (v * m + p - 1);
}

std::string OpString(const PipelineOp& op) {
  switch (op.kind) {
    case PipelineOp::Kind::kForward:
      return "F" + RefString(op.compute);
    case PipelineOp::Kind::kBackward:
      return "B" + RefString(op.compute);
    case PipelineOp::Kind::kExchange:
      break;
  }
  std::string s = "X[";
  if (op.send_next) s += " >" + RefString(*op.send_next);
  if (op.recv_prev) s += " <" + RefString(*op.recv_prev);
  if (op.send_prev) s += " <<" + RefString(*op.send_prev);
  if (op.recv_next) s += " >>" + RefString(*op.recv_next);
  return s + " ]";
}

}  // namespace moe::parallel
