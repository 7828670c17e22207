// Pipeline schedules as data: for one pipeline rank, the ordered forwards, backwards and batched
// point-to-point exchanges of a training step (Megatron-Core's schedules.py, without the
// communication overlap):
//
//   1F1B (virtual_pipeline = 1): rank r runs min(PP - r - 1, m) warm-up forwards, then alternates
//   one
//     forward and one backward, then the remaining backwards. Each rank holds at most PP - r
//     micro-batches' activations.
//   Interleaved 1F1B (virtual_pipeline = V > 1): the model is PP x V virtual stages; virtual stage
//   v
//     runs on rank v % PP as its chunk v / PP. Micro-batches go through the chunks in rounds of PP
//     (m must be a multiple of PP), with (PP - r - 1) x 2 + (V - 1) x PP warm-up forwards; the
//     bubble shrinks by V.
//
// Sends and receives that Megatron batches into one call (send_forward_recv_backward, ...) form one
// Exchange here, run as one batched call (an NCCL group on GPUs): every rank posts matching
// exchanges in the same order, so the schedule cannot deadlock.
// tests/engine/parallel/pipeline_schedule_test.cc checks that for many shapes by simulating every
// rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe::parallel {

// A tensor of the schedule: a local model chunk's input or output for one micro-batch.
struct PipeRef {
  int chunk = 0;
  int64_t micro_batch = 0;

  bool operator==(const PipeRef&) const = default;
};

struct PipelineOp {
  enum class Kind { kForward, kBackward, kExchange };
  Kind kind = Kind::kForward;
  PipeRef compute;  // kForward / kBackward: which chunk runs which micro-batch
  // kExchange: what goes where (any subset). "next" is rank (r + 1) % PP, "prev" rank (r - 1 + PP)
  // % PP.
  std::optional<PipeRef> send_next;  // the output of `chunk` for `micro_batch` (forward activation)
  std::optional<PipeRef> recv_prev;  // the input of `chunk` for `micro_batch`
  std::optional<PipeRef> send_prev;  // the gradient on the input of `chunk` (backward)
  std::optional<PipeRef> recv_next;  // the gradient on the output of `chunk`
};

struct PipelineShape {
  int pipeline_parallel = 1;
  int virtual_pipeline = 1;
  int64_t micro_batches = 1;
};

// The ops of `rank` (0 <= rank < PP) for one step. Requires micro_batches >= 1 and, when
// interleaved, micro_batches % PP == 0 (the job spec checks both).
std::vector<PipelineOp> BuildPipelineSchedule(const PipelineShape& shape, int rank);

// The idle fraction of an ideal pipeline with equal stage times: (PP - 1) / (V x m + PP - 1).
double IdealBubbleFraction(const PipelineShape& shape);

// "F0.3" (forward of chunk 0, micro-batch 3), "B1.0", "X[>0.3 <0.4]" for logs and test messages.
std::string OpString(const PipelineOp& op);

}  // namespace moe::parallel
