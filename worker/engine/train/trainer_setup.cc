// The trainer's setup: the job checked and its parts built (data, model, optimizer, checkpoints and
// their owner claim, the restore), the device's peak measured and the setup logged.
#include <chrono>
#include <cmath>
#include <new>
#include <thread>

#include "common/file_util.h"
#include "common/flops.h"
#include "common/log.h"
#include "common/path_roots.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/memory_stats.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/async_checkpoint.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/model.h"
#include "worker/engine/train/evaluator.h"
#include "worker/engine/train/optimizer.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/pipeline.h"
#include "worker/engine/train/trainer.h"
#include "worker/engine/train/trainer_internal.h"

namespace moe::train {

using internal::Clock;
using internal::Since;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobSpec& spec,
                                                   const parallel::ParallelContext& par,
                                                   const TrainerOptions& options) {
  const ParallelismConfig& want = spec.parallelism;
  if (want.world_size != par.world_size || want.expert_parallel != par.expert_parallel ||
      want.pipeline_parallel != par.pipeline_parallel) {
    const auto layout = [](int64_t w, int64_t pp, int64_t ep) {
      return "world_size " + std::to_string(w) + " (PP " + std::to_string(pp) + ", EP " +
             std::to_string(ep) + ")";
    };
    return InvalidArgumentError(
        "the job asks for " +
        layout(want.world_size, want.pipeline_parallel, want.expert_parallel) +
        ", this process group is " +
        layout(par.world_size, par.pipeline_parallel, par.expert_parallel));
  }
  std::unique_ptr<Trainer> t(new Trainer(spec, par, options));
  MOE_RETURN_IF_ERROR(t->Init());
  return t;
}

// After a save failed for its storage: the directory this rank holds may be gone or replaced (a
// remount, a storage outage that moved it away and back), so it is opened again beneath the roots
// for the next save, and the lead rank's claim read again there. A rank fenced off meanwhile stops
// (ABORTED); a directory still missing is tried again at the next save.
Status Trainer::ReopenCheckpoints() {
  if (!checkpoint_handle_) return OkStatus();
  auto again =
      ConfinedDir::Open("spec.checkpoint.dir", checkpoint_dir_, options_.checkpoint_roots, true);
  if (!again.ok()) return OkStatus();
  if (ownership_) {
    MOE_ASSIGN_OR_RETURN(checkpoint::CheckpointOwnership held,
                         checkpoint::CheckpointOwnership::Claim((*again)->Path(), checkpoint_dir_,
                                                                ownership_->claim()));
    *ownership_ = std::move(held);
  }
  // The handle before stays open while a background write may still use a path through it.
  retired_checkpoint_handle_ = std::move(checkpoint_handle_);
  checkpoint_handle_ = std::move(*again);
  checkpoints_->SetDir(checkpoint_handle_->Path());
  return OkStatus();
}

// The data the samplers read: where the worker confines it (options_.data_roots), through a
// directory held open beneath a root, so the files read are the ones the checks saw
// (common/confined_dir.h); the dataset's .bin, .idx and .json sit in that directory, so a path
// equal to a root is refused.
Status Trainer::OpenData() {
  JobSpec read = spec_;
  if (!options_.data_roots.empty() && spec_.data.source != "synthetic") {
    // A relative path: below the first root that holds it, as the agent checked it (the spec
    // keeps the path as written); nowhere here, below the first root, so the error names it there.
    std::string full = ResolveDatasetPath(spec_.data.path, options_.data_roots);
    if (full.empty()) {
      full =
          NormalizeAbsolute(spec_.data.path, NormalizeAbsolute(options_.data_roots.front(), "/"));
    } else {
      // The run's records (the checkpoints' manifest) name where the data was found: moe-export and
      // moe-generate find the run's tokenizer beside it from any directory.
      data_path_found_ = full;
    }
    StatusOr<std::unique_ptr<ConfinedDir>> dir =
        ConfinedDir::Open("spec.data.path", DirName(full), options_.data_roots, false);
    // Its directory missing below a root that is there: the dataset is not on this worker, and a
    // restart finds it missing again (permanent: the job fails at once, spending no restart). A
    // root that cannot be opened (storage not mounted yet) stays UNAVAILABLE: a restart may help.
    if (dir.status().code() == StatusCode::kNotFound) {
      return FailedPreconditionError(dir.status().message() +
                                     " on this worker (no dataset there: prepare it with moe-prep "
                                     "below a data root, or fix the path)");
    }
    MOE_ASSIGN_OR_RETURN(data_dir_, std::move(dir));
    read.data.path = data_dir_->Path(BaseName(full));
  }
  MOE_ASSIGN_OR_RETURN(sampler_, data::BatchSampler::Create(read, par_.dp_size()));
  if (spec_.training.eval_interval > 0) {
    MOE_ASSIGN_OR_RETURN(eval_sampler_,
                         data::BatchSampler::Create(read, par_.dp_size(), data::DataSplit::kValid));
  }
  return OkStatus();
}

// The checkpoint directory: confined beneath the worker's roots when it has them (held open: what
// is written lands there whatever is swapped in at the path later), and claimed by this attempt's
// lead rank when the job's identity is known (ownership.h: one job per directory, the newest
// attempt only); every commit, prune and history line is checked against that claim (Fence).
Status Trainer::OpenCheckpoints() {
  std::string io_dir = checkpoint_dir_;
  if (!options_.checkpoint_roots.empty()) {
    MOE_ASSIGN_OR_RETURN(
        checkpoint_handle_,
        ConfinedDir::Open("spec.checkpoint.dir", checkpoint_dir_, options_.checkpoint_roots, true));
    io_dir = checkpoint_handle_->Path();
  }
  if (options_.owner && lead_) {
    MOE_ASSIGN_OR_RETURN(
        checkpoint::CheckpointOwnership held,
        checkpoint::CheckpointOwnership::Claim(io_dir, checkpoint_dir_, *options_.owner));
    ownership_ = std::make_unique<checkpoint::CheckpointOwnership>(std::move(held));
  }
  const std::string tmp_suffix =
      options_.owner ? ".tmp-a" + std::to_string(options_.owner->attempt) : ".tmp";
  JobSpec recorded = spec_;  // the spec as sent, with where its relative data path was found
  if (!data_path_found_.empty()) recorded.data.path = data_path_found_;
  checkpoints_ = std::make_unique<checkpoint::CheckpointManager>(
      io_dir, par_, ModelFingerprint(spec_), spec_.checkpoint.keep_last, JobSpecToNode(recorded),
      tmp_suffix);
  if (checkpoint_handle_) checkpoints_->SetShownName(checkpoint_dir_);
  if (spec_.checkpoint.async)
    async_ = std::make_unique<checkpoint::AsyncCheckpointer>(checkpoints_.get(), par_);
  if (ownership_) {
    checkpoints_->SetFence(
        [this](const std::function<Status()>& commit) { return ownership_->WhileHeld(commit); });
  }
  // The claim fenced every older attempt off: their saves in progress (a kill or a fence mid-save)
  // are nobody's now.
  if (ownership_ && ownership_->Check().ok()) {
    if (const int n = checkpoints_->RemoveStaleSaves(); n > 0)
      MOE_LOG(INFO) << "removed " << n << " unfinished save(s) of earlier attempts in "
                    << checkpoint_dir_;
  }
  if (options_.owner) {
    checkpoints_->SetWriter(options_.owner->job + " attempt " +
                            std::to_string(options_.owner->attempt) + " epoch " +
                            std::to_string(options_.owner->epoch));
  }
  return OkStatus();
}

Status Trainer::Init() {
  if (options_.placement) {
    place_ = *options_.placement;
  } else {
    const std::string want = options_.device.empty() ? spec_.resources.device : options_.device;
    const std::string precision =
        options_.precision.empty() ? spec_.resources.precision.value_or("") : options_.precision;
    MOE_ASSIGN_OR_RETURN(place_, PlaceRank(want, precision, par_.rank));
  }
  deterministic_ = spec_.training.Deterministic(place_.device.is_cpu());
  if (place_.device.is_cpu()) kernels::SetReproducibleCpuGemm(deterministic_);
  kernels::SetDeterministicKernels(deterministic_);
  MOE_RETURN_IF_ERROR(OpenData());
  flops_per_step_ =
      MegatronFlopsPerStep(spec_.model, spec_.data.global_batch_size, spec_.data.seq_length);
  checkpoint_dir_ =
      options_.checkpoint_dir.empty() ? spec_.checkpoint.dir : options_.checkpoint_dir;
  checkpoint_interval_ = options_.checkpoint_interval >= 0 ? options_.checkpoint_interval
                                                           : spec_.checkpoint.interval_steps;
  if (!checkpoint_dir_.empty()) {
    MOE_RETURN_IF_ERROR(OpenCheckpoints());
  } else if (checkpoint_interval_ > 0 && lead_) {
    MOE_LOG(INFO)
        << "no checkpoint directory (spec.checkpoint.dir or --checkpoint-dir): checkpoints are off";
  }
  if (options_.resume && !checkpoints_) {
    return InvalidArgumentError(
        "--resume needs a checkpoint directory (--checkpoint-dir or spec.checkpoint.dir)");
  }
  int64_t chosen = 0;
  if (options_.resume) {
    MOE_ASSIGN_OR_RETURN(chosen, checkpoints_->Choose());
  }
  MOE_RETURN_IF_ERROR(BuildModel());
  // Hugging Face weights go into the full master weights, before the optimizer may shard them.
  if (!options_.init_from.empty() && chosen == 0) {
    MOE_RETURN_IF_ERROR(checkpoint::LoadHfWeights(options_.init_from, *model_, par_));
    if (lead_)
      MOE_LOG(INFO) << "initialised from the Hugging Face weights in " << options_.init_from;
  }
  optimizer_ = std::make_unique<Optimizer>(spec_.optimizer, model_->params(), par_,
                                           spec_.optimizer.Distributed(par_.dp_size()),
                                           spec_.model.moe.num_experts, deterministic_);
  optimizer_->SetOverlap(static_cast<int64_t>(spec_.parallelism.grad_bucket_mb * 1024 * 1024));
  if (options_.resume) MOE_RETURN_IF_ERROR(Restore(chosen));
  if (async_ && checkpoint_interval_ > 0) async_->Preallocate(*model_, *optimizer_);
  MeasurePeak();
  const int64_t mbs = spec_.data.micro_batch_size, seq = spec_.data.seq_length;
  tokens_ = Tensor::Empty({mbs, seq}, DType::kI32);
  targets_ = Tensor::Empty({mbs, seq}, DType::kI32);
  tokens_dev_ =
      place_.device.is_cpu() ? tokens_ : Tensor::Empty({mbs, seq}, DType::kI32, place_.device);
  targets_dev_ =
      place_.device.is_cpu() ? targets_ : Tensor::Empty({mbs, seq}, DType::kI32, place_.device);
  return OkStatus();
}

namespace {

// cuBLASLt's FP8 GEMMs want every FP8 weight's two GEMM dimensions in multiples of 16 (its e4m3
// alignment; partial 128 x 128 blocks are fine: DeepSeek-V3's kv_a is 576 x 7168).
Status CheckFp8Shapes(const model::ParamSet& params) {
  for (const auto& p : params.all()) {
    if (!p->fp8) continue;
    const int64_t n = p->compute.dim(p->compute.ndim() - 2),
                  k = p->compute.dim(p->compute.ndim() - 1);
    if (n % 16 != 0 || k % 16 != 0) {
      return FailedPreconditionError(
          "--precision fp8 on CUDA: " + p->name + " is " + std::to_string(n) + " x " +
          std::to_string(k) +
          "; cuBLASLt's FP8 GEMMs need the linear layers' dimensions in "
          "multiples of 16. Use bf16, or a model whose sizes are multiples of 16");
    }
  }
  return OkStatus();
}

}  // namespace

// This rank's model chunks: virtual stages pp_rank, pp_rank + PP, ... (Megatron's interleaving).
Status Trainer::BuildModel() {
  MOE_ASSIGN_OR_RETURN(layout_, ResolvePipelineLayout(spec_));
  model::ModelOptions mo;
  mo.dtype = DType::kF32;
  mo.device = place_.device;
  mo.compute = place_.compute;
  mo.fp8 = place_.precision == "fp8";
  if (spec_.optimizer.moments_dtype == "bf16") mo.moments = DType::kBF16;
  mo.max_seq_len = spec_.data.seq_length;
  mo.recompute = model::Recompute::From(spec_.training.recompute);
  mo.materialized_attention = spec_.training.attention == "materialized";
  if (mo.materialized_attention && !place_.device.is_cpu()) {
    return InvalidArgumentError(
        "spec.training.attention: materialized is the CPU reference path (no CUDA kernel); this "
        "rank runs on " +
        place_.name + ": use flash");
  }
  phases_ = std::make_unique<parallel::PhaseTimer>(
      place_.device.is_cuda() ? parallel::MakeDevicePhaseClock() : parallel::MakeHostPhaseClock());
  mo.phases = phases_.get();
  for (size_t v = static_cast<size_t>(par_.pp_rank()); v < layout_.size();
       v += static_cast<size_t>(par_.pipeline_parallel)) {
    mo.chunks.push_back(layout_[v]);
  }
  if (mo.fp8 && place_.device.is_cuda())
    MOE_RETURN_IF_ERROR(kernels::Fp8GemmSupport(place_.device));
  model_ = std::make_unique<model::Model>(spec_.model, par_, spec_.training.seed, mo);
  if (mo.fp8 && place_.device.is_cuda()) MOE_RETURN_IF_ERROR(CheckFp8Shapes(model_->params()));
  step_acc_ = Tensor::Zeros({kMtpSlot + std::max<int64_t>(spec_.model.mtp_depth, 0)}, DType::kF64,
                            place_.device);
  model_->SetDeviceLosses({step_acc_, kCeSlot, kAuxSlot, kMtpSlot});
  tied_embedding_ = par_.pipeline_parallel > 1 && layout_.back().mtp > 0;
  return OkStatus();
}

Status Trainer::Restore(int64_t step) {
  if (step > 0) {
    MOE_ASSIGN_OR_RETURN(checkpoint::CheckpointInfo info,
                         checkpoints_->Load(step, *model_, *optimizer_));
    start_step_ = info.step;
    // Said by the directory's path, not the descriptor it is read through (/proc/self/fd/N).
    if (lead_) {
      MOE_LOG(INFO) << "resumed from " << JoinPath(checkpoint_dir_, BaseName(info.path))
                    << " (step " << start_step_ << ")";
    }
  } else if (lead_) {
    MOE_LOG(INFO) << "no checkpoint in " << checkpoint_dir_ << "; starting from step 0";
  }
  return OkStatus();
}

void Trainer::MeasurePeak() {
  peak_flops_ = options_.peak_flops;
  peak_source_ = options_.peak_source.empty() ? "a peak given by the caller" : options_.peak_source;
  if (peak_flops_ > 0) return;
  if (place_.device.is_cuda()) {
    peak_flops_ = kernels::MeasureCudaBf16GemmFlops();
    peak_source_ = "cuBLAS bf16 GEMM 8192^3 measured on " + place_.name;
  }
  if (peak_flops_ <= 0) {
    const PeakFlops cpu = MeasureCpuSgemmPeak();
    peak_flops_ = cpu.flops_per_second;
    peak_source_ = cpu.source;
  }
}

void Trainer::LogSetup() const {
  if (!lead_) return;
  const ModelConfig& mc = spec_.model;
  const model::ParamSet& params = model_->params();  // this rank's
  MOE_LOG(INFO) << "device " << place_.name << ", " << place_.precision
                << (place_.precision == "bf16" ? " activations with fp32 master weights" : "")
                << (place_.precision == "fp8"
                        ? ": bf16 activations, fp32 master weights, the linear layers' GEMM inputs "
                          "in e4m3 (1x128 activation tiles, 128x128 weight blocks), "
                        : "")
                << (place_.precision != "fp8" ? ""
                    : place_.device.is_cuda()
                        ? "cuBLASLt's block-scaled FP8 GEMMs (checked against the emulation)"
                        : "emulated: quantised, dequantised, fp32 GEMM");
  MOE_LOG(INFO) << "model: " << (mc.preset.empty() ? "custom" : mc.preset) << ", "
                << params.NumElements() << " parameters on rank 0 (" << params.NumElements(true)
                << " in its experts), " << mc.num_layers << " layers (" << mc.first_k_dense
                << " dense), " << mc.moe.num_experts << " experts top-" << mc.moe.top_k
                << "; layout W=" << par_.world_size << " (PP " << par_.pipeline_parallel << " x DP "
                << par_.dp_size() << ", EP " << par_.expert_parallel << " within DP, expert DP "
                << par_.expert_dp_size() << "); " << spec_.micro_batches_per_rank()
                << " micro-batch(es) of " << spec_.data.micro_batch_size << " x "
                << spec_.data.seq_length << " per rank per step";
  if (par_.pipeline_parallel > 1) {
    std::string stages;
    for (size_t v = 0; v < layout_.size(); ++v)
      stages += (v ? " | " : "") + StageLayoutString(layout_[v]);
    MOE_LOG(INFO) << "pipeline: " << layout_.size() << " virtual stage(s) over PP "
                  << par_.pipeline_parallel << " (rank r holds stages r, r + PP, ...): " << stages
                  << "; " << (spec_.parallelism.virtual_pipeline > 1 ? "interleaved 1F1B" : "1F1B")
                  << ", ideal bubble "
                  << parallel::IdealBubbleFraction(
                         {.pipeline_parallel = static_cast<int>(par_.pipeline_parallel),
                          .virtual_pipeline = static_cast<int>(spec_.parallelism.virtual_pipeline),
                          .micro_batches = spec_.micro_batches_per_rank()});
  }
  const OptimizerBytes b = optimizer_->Bytes();
  MOE_LOG(INFO) << "optimizer: "
                << (optimizer_->distributed() ? "distributed (ZeRO-1: moments" : "replicated")
                << (optimizer_->distributed()
                        ? (optimizer_->sharded_master() ? " and fp32 master sharded" : " sharded")
                        : "")
                << (optimizer_->distributed() ? " over DP " + std::to_string(par_.dp_size()) +
                                                    ", the experts' over expert DP " +
                                                    std::to_string(par_.expert_dp_size()) + ")"
                                              : "")
                << "; rank 0 holds " << b.weights / 1048576.0 << " MiB weights, "
                << b.gradients / 1048576.0 << " MiB gradients, " << b.optimizer / 1048576.0
                << " MiB AdamW state";
  MOE_LOG(INFO)
      << "gradients: "
      << (deterministic_
              ? "deterministic (training.deterministic: f64 sums per micro-batch and source rank, "
                "reduced in f64; every layout trains like W = 1)"
              : "summed in their dtype in the layout's order (training.deterministic: false)")
      << "; GEMMs: " << (place_.device.is_cpu() ? kernels::CpuGemmBackendName() : "cuBLAS");
  if (optimizer_->overlap_spans() > 0) {
    MOE_LOG(INFO) << "gradient reduction: " << optimizer_->overlap_spans() << " spans of at least "
                  << spec_.parallelism.grad_bucket_mb
                  << " MB, each started when the backward has finished its "
                  << "blocks' gradients (parallelism.grad_bucket_mb)";
  }
  MOE_LOG(INFO) << "model FLOPs per step " << flops_per_step_ << " (Megatron formula); MFU against "
                << peak_source_ << " = " << peak_flops_ / 1e9 << " GFLOP/s per device";
}

}  // namespace moe::train
