#include "worker/engine/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "common/flops.h"
#include "common/log.h"
#include "kernels/elementwise.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/peak.h"

namespace moe {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Placement {
  Device device;
  std::string name;  // for logs and results
  DType compute = DType::kF32;
  std::string precision;
};

// The device and precision of this rank, from the spec and the options; binds the CUDA device.
StatusOr<Placement> Place(const JobSpec& spec, const ParallelContext& par, const TrainerOptions& options) {
  const std::string want = options.device.empty() ? spec.resources.device : options.device;
  MOE_ASSIGN_OR_RETURN(const int form, CudaIndexFor(want, 0, 1));  // the form first: a clear error on any machine
  Placement p;
  if (form < 0) {
    p.device = Device::Cpu();
    p.name = "cpu";
  } else {
#ifdef MOE_WITH_CUDA
    std::string problem;
    const int count = kernels::CudaDeviceCount(&problem);
    if (count == 0) {
      return FailedPreconditionError("device " + want + ": this machine has no usable CUDA device" +
                                     (problem.empty() ? "" : " (" + problem + ")"));
    }
    MOE_ASSIGN_OR_RETURN(const int index, CudaIndexFor(want, par.rank, count));
    MOE_RETURN_IF_ERROR(kernels::UseCudaDevice(index));
    p.device = Device::Cuda(index);
    p.name = p.device.ToString() + " (" + kernels::CudaDeviceName(index) + ")";
#else
    return FailedPreconditionError("device " + want + ": this build of the engine has no CUDA kernels");
#endif
  }
  p.precision = options.precision.empty() ? (p.device.is_cuda() ? "bf16" : "fp32") : options.precision;
  if (p.precision == "bf16") p.compute = DType::kBF16;
  else if (p.precision != "fp32") return InvalidArgumentError("--precision: '" + p.precision + "' is not fp32 or bf16");
  return p;
}

void SyncDevice(Device d) {
#ifdef MOE_WITH_CUDA
  if (d.is_cuda()) {
    const std::string e = kernels::CudaSynchronize();
    MOE_CHECK(e.empty()) << "CUDA: " << e;
  }
#else
  (void)d;
#endif
}

}  // namespace

StatusOr<int> CudaIndexFor(const std::string& device, int rank, int gpus) {
  if (device == "cpu") return -1;
  if (device == "cuda") return rank % std::max(gpus, 1);
  const std::string digits = device.rfind("cuda:", 0) == 0 ? device.substr(5) : "";
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgumentError("--device: '" + device + "' is not cpu, cuda or cuda:N");
  }
  return std::stoi(digits);
}

StatusOr<TrainResult> Train(const JobSpec& spec, const ParallelContext& par, const TrainerOptions& options) {
  if (spec.parallelism.world_size != par.world_size || spec.parallelism.expert_parallel != par.expert_parallel) {
    return InvalidArgumentError("the job asks for world_size " + std::to_string(spec.parallelism.world_size) + " x EP " +
                                std::to_string(spec.parallelism.expert_parallel) + ", this process group is " +
                                std::to_string(par.world_size) + " x EP " + std::to_string(par.expert_parallel));
  }
  const bool lead = par.rank == 0;
  const ModelConfig& mc = spec.model;
  const int64_t total_steps = spec.training.steps;
  const int64_t stop = options.stop_at_step > 0 ? options.stop_at_step : total_steps;
  const int64_t gbs = spec.data.global_batch_size, seq = spec.data.seq_length, mbs = spec.data.micro_batch_size;
  const int64_t micro_batches = spec.micro_batches_per_rank();
  const double ce_scale = 1.0 / static_cast<double>(gbs * seq);
  const double aux_coeff = mc.moe.seq_aux_loss_coeff / static_cast<double>(gbs);
  const double flops_per_step = MegatronFlopsPerStep(mc, gbs, seq);

  MOE_ASSIGN_OR_RETURN(std::unique_ptr<BatchSampler> sampler, BatchSampler::Create(spec, par.world_size));
  MOE_ASSIGN_OR_RETURN(const Placement place, Place(spec, par, options));
  const Device dev = place.device;
  double alltoall_seconds = 0;
  Model model(mc, par, spec.training.seed, DType::kF32, dev, &alltoall_seconds, place.compute);
  AdamWOptimizer optimizer(spec.optimizer);

  const std::string ckpt_dir = options.checkpoint_dir.empty() ? spec.checkpoint.dir : options.checkpoint_dir;
  const int64_t ckpt_interval = options.checkpoint_interval >= 0 ? options.checkpoint_interval : spec.checkpoint.interval_steps;
  std::unique_ptr<CheckpointManager> ckpt;
  if (!ckpt_dir.empty()) {
    ckpt = std::make_unique<CheckpointManager>(ckpt_dir, par, ModelFingerprint(spec), spec.checkpoint.keep_last);
  }
  if (!ckpt && ckpt_interval > 0 && lead) {
    MOE_LOG(INFO) << "no checkpoint directory (spec.checkpoint.dir or --checkpoint-dir): checkpoints are off";
  }
  int64_t start_step = 0;
  if (options.resume) {
    if (!ckpt) return InvalidArgumentError("--resume needs a checkpoint directory (--checkpoint-dir or spec.checkpoint.dir)");
    MOE_ASSIGN_OR_RETURN(CheckpointInfo info, ckpt->Restore(model));
    model.params().SyncCompute();
    start_step = info.step;
    if (lead) {
      if (start_step > 0) MOE_LOG(INFO) << "resumed from " << info.path << " (step " << start_step << ")";
      else MOE_LOG(INFO) << "no checkpoint in " << ckpt_dir << "; starting from step 0";
    }
  }

  PeakFlops peak{options.peak_flops, options.peak_source.empty() ? "a peak given by the caller" : options.peak_source};
  if (peak.flops_per_second <= 0) {
#ifdef MOE_WITH_CUDA
    if (dev.is_cuda()) {
      peak = {kernels::MeasureCudaBf16GemmFlops(), "cuBLAS bf16 GEMM 8192^3 measured on " + place.name};
    }
#endif
    if (peak.flops_per_second <= 0) peak = MeasureCpuSgemmPeak();
  }
  if (lead) {
    const int64_t params = model.params().NumElements();
    MOE_LOG(INFO) << "device " << place.name << ", " << place.precision
                  << (place.precision == "bf16" ? " activations with fp32 master weights" : "");
    MOE_LOG(INFO) << "model: " << (mc.preset.empty() ? "custom" : mc.preset) << ", " << params << " parameters on rank 0 ("
                  << model.params().NumElements(true) << " in its experts), " << mc.num_layers << " layers ("
                  << mc.first_k_dense << " dense), " << mc.moe.num_experts << " experts top-" << mc.moe.top_k
                  << "; layout W=" << par.world_size << " (DP " << par.data_parallel() << " x EP " << par.expert_parallel
                  << "); " << micro_batches << " micro-batch(es) of " << mbs << " x " << seq << " per rank per step";
    MOE_LOG(INFO) << "model FLOPs per step " << flops_per_step << " (Megatron formula); MFU against " << peak.source
                  << " = " << peak.flops_per_second / 1e9 << " GFLOP/s per device";
  }
  if (start_step >= stop) {
    TrainResult r;
    r.first_step = r.last_step = start_step;
    if (lead) MOE_LOG(INFO) << "nothing to do: the checkpoint is at step " << start_step << ", the run stops at " << stop;
    return r;
  }

  std::ofstream metrics_file;
  if (lead && !options.metrics_out.empty()) {
    metrics_file.open(options.metrics_out, options.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_file) return UnavailableError("cannot open --metrics-out file '" + options.metrics_out + "'");
  }

  const size_t n_moe = model.moe_layers().size();
  const int64_t experts = mc.moe.num_experts;
  Tensor tokens = Tensor::Empty({mbs, seq}, DType::kI32), targets = Tensor::Empty({mbs, seq}, DType::kI32);
  Tensor tokens_dev = dev.is_cpu() ? tokens : Tensor::Empty({mbs, seq}, DType::kI32, dev);
  Tensor targets_dev = dev.is_cpu() ? targets : Tensor::Empty({mbs, seq}, DType::kI32, dev);
  TrainResult result;
  result.device = place.name;
  result.precision = place.precision;
  result.first_step = start_step + 1;
  result.peak_source = peak.source;
  double sum_tps = 0, sum_tflops = 0, sum_mfu = 0;
  int64_t measured = 0;

  for (int64_t step = start_step + 1; step <= stop; ++step) {
    if (options.should_stop) {
      // Every rank must stop at the same step boundary, or the others would wait in the next step's
      // collectives: the ranks agree by summing their flags.
      double stop_votes = options.should_stop() ? 1.0 : 0.0;
      par.world->SetPhase("step " + std::to_string(step) + ": stop agreement");
      MOE_RETURN_IF_ERROR(par.world->AllReduceSumHost(&stop_votes, 1));
      if (stop_votes > 0) {
        result.stopped_early = true;
        if (lead) MOE_LOG(INFO) << "stopping before step " << step << " (asked to stop)";
        break;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string phase = "step " + std::to_string(step);
    par.world->SetPhase(phase);
    if (par.ep_group) par.ep_group->SetPhase(phase + ": MoE token all-to-all");
    alltoall_seconds = 0;
    model.params().ZeroGrads();
    // Stats to sum over ranks: ce_sum, aux, then tokens per expert for every MoE layer.
    std::vector<double> stats(2 + n_moe * static_cast<size_t>(experts), 0.0);
    for (int64_t m = 0; m < micro_batches; ++m) {
      sampler->MicroBatch(step, par.rank, m, tokens.data<int32_t>(), targets.data<int32_t>());
      if (dev.is_cuda()) {
        tokens_dev.CopyFrom(tokens);
        targets_dev.CopyFrom(targets);
      }
      MOE_ASSIGN_OR_RETURN(MicroBatchResult mb, model.ForwardBackward(tokens_dev, targets_dev, ce_scale, aux_coeff));
      stats[0] += mb.ce_sum;
      stats[1] += mb.aux_loss;
      for (size_t l = 0; l < n_moe; ++l)
        for (int64_t e = 0; e < experts; ++e) stats[2 + l * static_cast<size_t>(experts) + static_cast<size_t>(e)] += static_cast<double>(mb.tokens_per_expert[l][static_cast<size_t>(e)]);
    }
    if (options.inject_step_delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(options.inject_step_delay));
    SyncDevice(dev);
    const auto t_fb = std::chrono::steady_clock::now();
    const double step_a2a = alltoall_seconds;
    // Gradients: dense ones summed over all ranks, experts over the ranks holding the same experts.
    // (Each micro-batch's loss was scaled by 1/global tokens, so the sum is the global mean's gradient.)
    double dense_sq = 0, expert_sq = 0;
    par.world->SetPhase(phase + ": gradient all-reduce");
    for (const auto& p : model.params().all()) {
      Communicator* group = p->expert ? par.expert_dp : par.world;
      if (group->size() > 1) MOE_RETURN_IF_ERROR(group->AllReduceSum(p->grad));
      (p->expert ? expert_sq : dense_sq) += kernels::SumSquares(p->grad);
    }
    MOE_RETURN_IF_ERROR(par.world->AllReduceSumHost(stats.data(), static_cast<int64_t>(stats.size())));
    if (par.ep_group->size() > 1) MOE_RETURN_IF_ERROR(par.ep_group->AllReduceSumHost(&expert_sq, 1));
    const double grad_norm = std::sqrt(dense_sq + expert_sq);
    const auto t_sync = std::chrono::steady_clock::now();
    const double lr = LearningRate(spec.optimizer, spec.decay_steps(), step);
    if (std::isfinite(grad_norm)) {
      optimizer.Step(model.params(), step, lr, grad_norm);
      model.params().SyncCompute();
    } else if (lead) MOE_LOG(WARNING) << "step " << step << ": gradient norm is " << grad_norm << "; update skipped";
    // Aux-loss-free balancing from the step's global token counts.
    StepMetrics m;
    for (size_t l = 0; l < n_moe; ++l) {
      std::vector<double> counts(stats.begin() + 2 + static_cast<long>(l * static_cast<size_t>(experts)),
                                 stats.begin() + 2 + static_cast<long>((l + 1) * static_cast<size_t>(experts)));
      if (mc.moe.bias_update_rate > 0) model.moe_layers()[l]->UpdateBias(counts, mc.moe.bias_update_rate);
      double mx = 0, sum = 0;
      for (double c : counts) { mx = std::max(mx, c); sum += c; }
      const double imb = sum > 0 ? mx / (sum / static_cast<double>(experts)) : 0;
      m.expert_load_imbalance_per_layer.push_back(imb);
      m.expert_load_imbalance = std::max(m.expert_load_imbalance, imb);
    }
    SyncDevice(dev);  // the step's kernels are queued asynchronously on a GPU: time them whole
    const auto t1 = std::chrono::steady_clock::now();
    m.step = step;
    m.total_steps = stop;
    m.tokens = gbs * seq;
    m.loss = stats[0] / static_cast<double>(m.tokens);
    m.aux_loss = stats[1];
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.step_seconds = Seconds(t0, t1);
    m.tokens_per_second = static_cast<double>(m.tokens) / m.step_seconds;
    m.tflops_per_device = TflopsPerDevice(flops_per_step, m.step_seconds, par.world_size);
    m.peak_tflops = peak.flops_per_second / 1e12;
    m.peak_source = peak.source;
    m.mfu = m.peak_tflops > 0 ? m.tflops_per_device / m.peak_tflops : 0;
    m.alltoall_seconds = step_a2a;
    m.compute_seconds = Seconds(t0, t_fb) - step_a2a;
    m.grad_sync_seconds = Seconds(t_fb, t_sync);
    m.consumed_samples = step * gbs;
    m.world_size = par.world_size;
    m.rank = par.rank;
    if (!std::isfinite(m.loss)) {
      return InternalError("step " + std::to_string(step) + ": the loss is " + std::to_string(m.loss) + " (diverged)");
    }
    if (result.last_step == 0 || step == result.first_step) result.first_loss = m.loss;
    result.last_step = step;
    result.last_loss = m.loss;
    // The first step carries one-time costs (page faults, allocator warm-up); leave it out of means.
    if (step > result.first_step || stop == result.first_step) {
      sum_tps += m.tokens_per_second;
      sum_tflops += m.tflops_per_device;
      sum_mfu += m.mfu;
      ++measured;
    }
    if (lead) {
      if (metrics_file.is_open()) metrics_file << MetricsJson(m) << "\n" << std::flush;
      if (options.log_steps && (step % spec.training.log_interval == 0 || step == stop || step == result.first_step)) {
        MOE_LOG(INFO) << MegatronLogLine(m);
      }
    }
    if (options.on_step) options.on_step(m);
    if (ckpt && ((ckpt_interval > 0 && step % ckpt_interval == 0) || step == stop)) {
      const auto c0 = std::chrono::steady_clock::now();
      Node state = Node::Map();
      state.Set("step", Node::Scalar(std::to_string(step)));
      state.Set("consumed_samples", Node::Scalar(std::to_string(m.consumed_samples)));
      state.Set("seed", Node::Scalar(std::to_string(spec.training.seed)));
      state.Set("loss", Node::Scalar(std::to_string(m.loss)));
      MOE_RETURN_IF_ERROR(ckpt->Save(step, model, state));
      if (lead) {
        MOE_LOG(INFO) << "saved checkpoint " << CheckpointManager::StepDirName(step) << " in " << ckpt_dir << " ("
                      << Seconds(c0, std::chrono::steady_clock::now()) << " s)";
      }
    }
  }
  if (measured > 0) {
    result.mean_tokens_per_second = sum_tps / static_cast<double>(measured);
    result.mean_tflops_per_device = sum_tflops / static_cast<double>(measured);
    result.mean_mfu = sum_mfu / static_cast<double>(measured);
  }
  return result;
}

}  // namespace moe
