// What each rank of a job will hold, by category, before it runs: the model of the engine's own
// allocations (kernels/memory_stats.h measures the same categories while training).
//
//   weights        the compute copies (bf16 on GPUs) and the fp32 master weights; under the
//                  distributed optimizer with bf16 compute copies only this rank's shard of the
//                  master
//   gradients      fp32 gradient buffers of every parameter the rank holds (ZeRO-1 keeps them
//   whole),
//                  and their f64 accumulators under training.deterministic (the default on CPU)
//   optimizer      both AdamW moments (fp32 or bf16), sharded over the data-parallel group under
//   ZeRO activations    what the forward keeps for the backward, per micro-batch in flight: the
//   schedule's
//                  warm-up forwards plus one (1F1B: PP - r on pipeline rank r; interleaved:
//                  (PP - r - 1) x 2 + (V - 1) x PP + 1 chunk-micro-batches), with selective
//                  recompute dropping what it recomputes; plus the backward's working set of one
//                  layer (and, deterministic, the staging of the largest dense gradient)
//   communication  the all-to-all staging of one MoE layer's tokens (EP > 1)
//
// The figures follow the layers' saved tensors (worker/engine/*: Saved structs) at the expected
// token counts (routed rows: tokens x top_k per rank on average). Not counted: the allocator's
// cache, CUDA and NCCL workspaces, fragmentation (plan for a few GB of headroom on a GPU).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"

namespace moe {

enum class MemoryKind : uint8_t {
  kWeights = 0,
  kGradients,
  kOptimizer,
  kActivations,
  kCommunication,
  kCount
};
constexpr size_t kNumMemoryKinds = static_cast<size_t>(MemoryKind::kCount);
const char* MemoryKindName(MemoryKind k);

struct StageMemory {
  int pp_rank = 0;
  std::string layout;                    // its virtual stages, "Et*3 | t*4"
  double params = 0, expert_params = 0;  // this rank's (its share of the experts)
  int64_t in_flight = 0;  // chunk-micro-batches whose activations are held at the peak
  double activations_per_micro_batch = 0;  // all of its chunks, one micro-batch each
  std::array<double, kNumMemoryKinds> bytes{};
  double peak() const;
};

struct MemoryPlan {
  std::vector<StageMemory>
      stages;  // one per pipeline rank (the DP and EP ranks of a stage hold the same)
  int64_t compute_bytes = 4;  // activations' element size (2: bf16)
  bool distributed_optimizer = false;
  const StageMemory& largest() const;
};

// The loss's chunks (worker/engine/model/head_loss.h): the head and the cross-entropy run over as
// many rows at a time as keep one chunk's logits (`logits_bytes` an element) within
// kLossChunkBytes (a multiple of 128 rows from 128 up): at least one row, at most `rows`.
inline constexpr int64_t kLossChunkBytes = int64_t{1} << 30;
int64_t LossChunkRows(int64_t rows, int64_t vocab, int64_t logits_bytes);

// compute_dtype_bytes: 2 for bf16 activations (GPU ranks), 4 for fp32 (CPU ranks).
// gemm_input_bytes: what an input a linear layer saves for its backward costs per element (0: the
// compute dtype's; 1.03125 for a stack that saves them MXFP8-quantized, 1 byte and an 8-bit scale
// per 32 values, as Transformer Engine does under fp8 recipes).
// tensor_parallel: the planner's TP (moectl plan; the job spec has none and this engine runs
// none): TP ranks split the dense parameters (attention, dense FFN, shared experts, embedding and
// head) and, with sequence parallelism as Megatron-Core runs MoE under TP, every activation; the
// routed experts stay split by EP alone (expert TP 1, EP folded over TP x DP). The dense optimizer
// shards over DP / TP, so a rank's dense optimizer state is unchanged; the micro-batches per rank
// grow by TP (DP / TP replicas share the global batch).
StatusOr<MemoryPlan> EstimateMemory(const JobSpec& spec, int64_t compute_dtype_bytes,
                                    double gemm_input_bytes = 0, int64_t tensor_parallel = 1);

// The table --describe prints: per pipeline rank and category, the peak, and when `capacity_bytes`
// > 0 whether it fits (and if not, what dominates and what would help).
std::string MemoryReport(const JobSpec& spec, const MemoryPlan& plan, double capacity_bytes);

}  // namespace moe
