// GPU benchmarks, each a ratio measured in one run:
//   1. the dense bf16 GEMM rate of cuBLAS on this card (8192^3, and the routed experts' w13 GEMM as
//      one dense call of the same size): the ceilings;
//   2. the engine's MoE layer, forward + backward, at DeepSeek-V3 expert sizes (hidden 7168, expert
//      FFN 2048, top-8 of 32 local experts in 8 groups, 16k tokens, bf16, no shared expert):
//      TFLOP/s of its GEMM work (Megatron's count) over the dense rate;
//   3. flash attention forward + backward at S = 4096 (bf16, B = 1, 128 heads): DeepSeek-V3's MLA
//      head sizes (d_qk 192, d_v 128) and plain MHA (128/128), TFLOP/s by the causal count
//      (forward 2 * B*H*S^2/2 * (d_qk + d_v), backward twice that: Megatron's convention);
//      bench/moe_layer_torch.py times PyTorch's scaled_dot_product_attention at the same shapes;
//   4. a full training step of the `small` preset on this GPU (bf16): TFLOP/s per device and MFU
//      against the measured 8192^3 rate.
// Every time is the median of its calls, each timed by CUDA events. Prints RESULT lines (key value)
// that tests/gpu/check.sh and tests/gpu/perf.sh turn into their tables.
//
//   moe-bench-gpu [--tokens 16384] [--iters 5] [--small-steps 6] [--small-seq 2048]
//   [--small-micro-batch 8] [--small-micro-batches 4] moe-bench-gpu --rehearse-cpu    the same
//   program at toy sizes with the CPU standing in for the GPU
//                                   (tests the program, not the GPU; its figures mean nothing)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda_device.h"
#include "common/args.h"
#include "common/log.h"
#include "kernels/attention.h"
#include "kernels/cuda/sm90a/grouped_gemm.h"
#include "kernels/elementwise.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"
#include "kernels/permute.h"
#include "kernels/runtime.h"
#include "worker/engine/model/layers.h"
#include "worker/engine/parallel/dispatcher.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/trainer.h"

namespace {

// Rows per expert proportional to 1 / (e + 1), at least one each, summing to `total`; the
// rounding's remainder to expert 0 (bench/grouped_gemm_torch.py's skewed_counts is the same split).
std::vector<int64_t> SkewedCounts(int64_t experts, int64_t total) {
  double harmonic = 0;
  for (int64_t e = 0; e < experts; ++e) harmonic += 1.0 / static_cast<double>(e + 1);
  std::vector<int64_t> counts;
  int64_t sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    counts.push_back(std::max<int64_t>(
        1,
        static_cast<int64_t>(static_cast<double>(total) / static_cast<double>(e + 1) / harmonic)));
    sum += counts.back();
  }
  counts[0] += total - sum;
  return counts;
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool g_cuda = true;

void Sync() {
  if (!g_cuda) return;
  const std::string e = moe::kernels::CudaSynchronize();
  MOE_CHECK(e.empty()) << "CUDA: " << e;
}

// The median of `reps` calls after one warm-up, each timed on the device (CUDA events around it,
// read once the device passed the last; the host's clock on the CPU stand-in). Not the best of
// host clocks, which measured the host's queueing where a call returns before its work is done.
template <typename Fn>
double MedianSeconds(int reps, Fn&& fn) {
  fn();
  Sync();
  std::vector<double> t;
  if (!g_cuda) {
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      fn();
      t.push_back(Seconds(t0, Clock::now()));
    }
  } else {
    std::vector<void*> marks{moe::kernels::RecordDeviceMark()};
    for (int r = 0; r < reps; ++r) {
      fn();
      marks.push_back(moe::kernels::RecordDeviceMark());
    }
    moe::kernels::WaitDeviceMark(marks.back());
    for (size_t i = 0; i + 1 < marks.size(); ++i)
      t.push_back(moe::kernels::DeviceMarkSeconds(marks[i], marks[i + 1]));
    for (void* m : marks) moe::kernels::ReleaseDeviceMark(m);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// CUTLASS's Hopper grouped GEMM on the same rows with the counts in device memory (kernels/gemm.h
// GroupedGemmDeviceCounts's path: no host read), or why it did not run.
void CutlassGroupedRow(const std::string& label, const moe::Tensor& x, const moe::Tensor& w,
                       const moe::Tensor& y, const std::vector<int64_t>& counts, double flop,
                       double dense, bool rehearse) {
  std::string why = rehearse ? "rehearsal: CUTLASS's kernel needs an sm_90 GPU" : "";
#ifdef MOE_WITH_SM90A
  if (!rehearse) {
    const moe::Tensor dev_counts =
        moe::Tensor::FromVector<int64_t>(counts, {static_cast<int64_t>(counts.size())})
            .Clone(y.device());
    auto run = [&] {
      return moe::kernels::cuda::sm90a::GroupedGemmBf16DeviceCounts(
          x.raw(), w.raw(), y.raw(), static_cast<const int64_t*>(dev_counts.raw()), w.dim(0),
          x.dim(0), w.dim(1), w.dim(2), moe::kernels::KernelStream(), &why);
    };
    if (run()) {
      const double rate = flop / MedianSeconds(5, run);
      std::printf(
          "RESULT grouped_gemm_%s_rows_cutlass_tflops %.1f  (of dense %.3f; CUTLASS %s "
          "sm90a, counts on the device)\n",
          label.c_str(), rate / 1e12, rate / dense,
          moe::kernels::cuda::sm90a::CutlassVersion().c_str());
      return;
    }
  }
#else
  if (!rehearse) why = "this build has no Hopper paths (configure found no CUTLASS headers)";
#endif
  std::printf("RESULT grouped_gemm_%s_rows_cutlass_tflops n/a (%s)\n", label.c_str(), why.c_str());
}

// Attention forward, then forward + backward, at one shape (bf16, batch 1); prints RESULT
// attention_<name>_{fwd_ms,fwd_tflops,ms,tflops}.
void BenchAttention(const char* name, int64_t seq, int64_t heads, int64_t d_qk, int64_t d_v,
                    moe::Device dev, int reps) {
  const moe::DType bf = moe::DType::kBF16;
  using moe::Tensor;
  Tensor q = Tensor::Empty({seq, heads * d_qk}, bf, dev),
         k = Tensor::Empty({seq, heads * d_qk}, bf, dev);
  Tensor v = Tensor::Empty({seq, heads * d_v}, bf, dev),
         dout = Tensor::Empty({seq, heads * d_v}, bf, dev);
  Tensor out = Tensor::Empty({seq, heads * d_v}, bf, dev),
         lse = Tensor::Empty({heads * seq}, moe::DType::kF32, dev);
  Tensor dq = Tensor::Empty(q.shape(), bf, dev), dk = Tensor::Empty(k.shape(), bf, dev),
         dv = Tensor::Empty(v.shape(), bf, dev);
  uint64_t seed = 20;
  for (const Tensor* t : {&q, &k, &v, &dout}) moe::kernels::FillUniform(*t, ++seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_qk));
  auto forward = [&] { moe::kernels::AttentionForward(q, k, v, 1, seq, heads, scale, out, lse); };
  const double fwd = MedianSeconds(reps, forward);
  const double both = MedianSeconds(reps, [&] {
    forward();
    moe::kernels::AttentionBackward(q, k, v, out, dout, lse, 1, seq, heads, scale, dq, dk, dv);
  });
  const double fwd_flops = static_cast<double>(heads) * static_cast<double>(seq) *
                           static_cast<double>(seq) * static_cast<double>(d_qk + d_v);
  std::printf("RESULT attention_%s_fwd_ms %.3f\n", name, fwd * 1e3);
  std::printf("RESULT attention_%s_fwd_tflops %.1f\n", name, fwd_flops / fwd / 1e12);
  std::printf(
      "RESULT attention_%s_ms %.3f  (forward + backward, S %lld, %lld heads, d_qk %lld, d_v %lld, "
      "bf16)\n",
      name, both * 1e3, static_cast<long long>(seq), static_cast<long long>(heads),
      static_cast<long long>(d_qk), static_cast<long long>(d_v));
  // Megatron's convention, the one every row of perf.sh's table uses: the backward twice the
  // forward (this row counted 2.5 times before 2026-12-07: its figures were 3.5 / 3 of these).
  std::printf("RESULT attention_%s_tflops %.1f\n", name, 3.0 * fwd_flops / both / 1e12);
}

// The DeepSeek-V3 MoE layer's sizes (bench/gpu_bench.cc's section 2).
struct MoeShape {
  int64_t tokens, h, f, experts, k;
};

// The MoE layer, forward + backward, its median time: bf16, or with its experts' GEMMs in FP8
// (block-scaled e4m3 as DeepSeek-V3 trains, the quantisation included). *imbalance: the last
// step's max over mean tokens per expert.
double BenchMoeLayer(const MoeShape& m, bool fp8, int64_t iters, moe::Device dev,
                     double* imbalance) {
  moe::ModelConfig cfg;
  cfg.hidden_size = m.h;
  cfg.init_std = 0;  // constant on the host (fast); random values are filled in on the device below
  cfg.moe = moe::MoeConfig{.num_experts = m.experts,
                           .top_k = m.k,
                           .num_shared_experts = 0,
                           .ffn_hidden = m.f,
                           .num_groups = 8,
                           .topk_groups = 4,
                           .score_function = "sigmoid",
                           .route_scale = 2.5,
                           .bias_update_rate = 1e-3,
                           .seq_aux_loss_coeff = 1e-4};
  moe::model::ParamSet params(moe::DType::kF32, dev, moe::DType::kBF16, std::nullopt, fp8);
  moe::parallel::TokenDispatcher dispatcher(nullptr, m.experts, nullptr);
  moe::model::MoeLayer layer(params, "moe", cfg, 1, 0, &dispatcher, moe::DType::kF32, dev);
  // Uniform in [-a, a) with a = 0.006 * sqrt(3): std 0.006, as DeepSeek-V3 initialises. Random
  // values, not constants: matrix units run faster on constant data, and routing needs distinct
  // scores.
  uint64_t seed = 100;
  for (const auto& p : params.all()) {
    moe::kernels::FillUniform(p->value, ++seed);
    moe::kernels::Scale(p->value, 0.006 * std::sqrt(3.0));
  }
  params.SyncCompute();
  moe::Tensor x = moe::Tensor::Empty({m.tokens, m.h}, moe::DType::kBF16, dev),
              dy = moe::Tensor::Empty({m.tokens, m.h}, moe::DType::kBF16, dev);
  moe::kernels::FillUniform(x, 5);
  moe::kernels::FillUniform(dy, 6);
  moe::kernels::Scale(dy, 1e-3);
  const int64_t seqs = 4, seq_len = m.tokens / seqs;
  auto step = [&] {
    moe::model::MoeStats stats;
    auto out = layer.Forward(x, seqs, seq_len, 1e-4 / seqs, &stats);
    MOE_CHECK(out.ok()) << out.status();
    auto dx = layer.Backward(dy);
    MOE_CHECK(dx.ok()) << dx.status();
    int64_t mx = 0;
    for (int64_t c : stats.tokens_per_expert) mx = std::max(mx, c);
    *imbalance = static_cast<double>(mx) * static_cast<double>(m.experts) /
                 static_cast<double>(m.tokens * m.k);
  };
  step();  // warm-up: cuBLAS picks its kernels, the caching allocator fills
  return MedianSeconds(static_cast<int>(iters), step);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 16384, iters = 5, small_steps = 6, small_seq = 2048, small_micro = 8,
          small_accum = 4;
  bool rehearse = false;
  moe::ArgParser args(
      "moe-bench-gpu",
      "GPU: dense bf16 GEMM rate, the MoE layer at DeepSeek-V3 sizes, a `small` step.");
  args.AddInt("tokens", &tokens, "tokens through the MoE layer (default 16384)");
  args.AddInt("iters", &iters, "timed MoE layer iterations after warm-up (default 5)");
  args.AddInt("small-steps", &small_steps,
              "training steps at `small` (the first is not timed; 0 skips; default 6)");
  args.AddInt("small-seq", &small_seq, "sequence length of the `small` step (default 2048)");
  args.AddInt("small-micro-batch", &small_micro, "sequences per `small` micro-batch (default 8)");
  args.AddInt("small-micro-batches", &small_accum,
              "micro-batches per `small` step, the gradients accumulated and the optimizer run "
              "once (as training runs; default 4)");
  args.AddFlag("rehearse-cpu", &rehearse,
               "run at toy sizes on the CPU (tests this program; the figures mean nothing)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  if (tokens < 64 || tokens % 4 != 0) {
    std::fprintf(stderr, "moe-bench-gpu: --tokens: a multiple of 4, at least 64\n");
    return 2;
  }
  if (small_micro < 1 || small_accum < 1 || small_seq < 2) {
    std::fprintf(stderr,
                 "moe-bench-gpu: --small-micro-batch and --small-micro-batches at least 1, "
                 "--small-seq at least 2\n");
    return 2;
  }
  moe::SetLogLevel(moe::LogLevel::kWarning);
  g_cuda = !rehearse;
  if (rehearse) {
    tokens = 256;
    iters = 1;
    small_steps = std::min<int64_t>(small_steps, 3);
    small_seq = 64;
    small_micro = 2;
    small_accum = 2;
  } else {
    if (const int rc = moe::bench::UseFirstCudaDevice("moe-bench-gpu"); rc != 0) return rc;
  }
  const moe::Device dev = rehearse ? moe::Device::Cpu() : moe::Device::Cuda(0);
  std::printf("RESULT device %s\n", rehearse ? "cpu (rehearsal: the figures mean nothing)"
                                             : moe::kernels::CudaDeviceName(0).c_str());

  // 1. Dense bf16 GEMM rates.
  const double peak = rehearse ? 1e11 : moe::kernels::MeasureCudaBf16GemmFlops(8192, 10);
  std::printf("RESULT gemm_bf16_8192_tflops %.1f\n", peak / 1e12);
  // DeepSeek-V3's expert sizes; a toy of the same shape when rehearsing.
  const int64_t h = rehearse ? 64 : 7168, f = rehearse ? 32 : 2048, experts = 32, k = 8,
                rows = tokens * k;
  double dense = 0;
  {
    moe::Tensor x = moe::Tensor::Empty({rows, h}, moe::DType::kBF16, dev),
                w = moe::Tensor::Empty({2 * f, h}, moe::DType::kBF16, dev);
    moe::Tensor y = moe::Tensor::Empty({rows, 2 * f}, moe::DType::kBF16, dev);
    moe::kernels::FillUniform(x, 3);
    moe::kernels::FillUniform(w, 4);
    const double s = MedianSeconds(5, [&] { moe::kernels::Gemm(x, false, w, true, y); });
    dense =
        2.0 * static_cast<double>(rows) * static_cast<double>(2 * f) * static_cast<double>(h) / s;
    std::printf(
        "RESULT gemm_bf16_expert_shape_tflops %.1f  (one [%lld x %lld] x [%lld x %lld]^T call)\n",
        dense / 1e12, static_cast<long long>(rows), static_cast<long long>(h),
        static_cast<long long>(2 * f), static_cast<long long>(h));
  }

  // 1b. The experts' grouped GEMM (w13's shape, forward) at 128, 512 and 4,096 rows per expert, 32
  // experts, and at a skewed split of 512 on average (SkewedCounts: a learned router's imbalance):
  // a cuBLAS call per expert against one grouped call, each against the dense rate above.
  // bench/grouped_gemm_torch.py is PyTorch's side of the same rows.
  std::vector<std::pair<std::string, std::vector<int64_t>>> splits;
  for (const int64_t per : {int64_t{128}, int64_t{512}, int64_t{4096}})
    splits.emplace_back(std::to_string(per),
                        std::vector<int64_t>(experts, rehearse ? per / 32 : per));
  splits.emplace_back("skewed", SkewedCounts(experts, (rehearse ? 16 : 512) * experts));
  for (const auto& [label, counts] : splits) {
    std::vector<int64_t> offsets = {0};
    for (const int64_t c : counts) offsets.push_back(offsets.back() + c);
    const int64_t total = offsets.back();
    moe::Tensor x = moe::Tensor::Empty({total, h}, moe::DType::kBF16, dev);
    moe::Tensor w = moe::Tensor::Empty({experts, 2 * f, h}, moe::DType::kBF16, dev);
    moe::Tensor y = moe::Tensor::Empty({total, 2 * f}, moe::DType::kBF16, dev);
    moe::kernels::FillUniform(x, 7);
    moe::kernels::FillUniform(w, 8);
    const double flop =
        2.0 * static_cast<double>(total) * static_cast<double>(2 * f) * static_cast<double>(h);
    double rate[2] = {0, 0};
    const moe::kernels::GroupedGemmMode modes[2] = {moe::kernels::GroupedGemmMode::kLoop,
                                                    moe::kernels::GroupedGemmMode::kGrouped};
    for (int m = 0; m < 2; ++m) {
      moe::kernels::SetGroupedGemmMode(modes[m]);
      moe::kernels::GroupedGemm(x, w, offsets, y);  // warm-up
      rate[m] = flop / MedianSeconds(5, [&] { moe::kernels::GroupedGemm(x, w, offsets, y); });
    }
    moe::kernels::SetGroupedGemmMode(moe::kernels::GroupedGemmMode::kAuto);
    const auto [least, most] = std::minmax_element(counts.begin(), counts.end());
    std::printf(
        "RESULT grouped_gemm_%s_rows_loop_tflops %.1f  (of dense %.3f; %lld rows, %lld-%lld an "
        "expert)\n",
        label.c_str(), rate[0] / 1e12, rate[0] / dense, static_cast<long long>(total),
        static_cast<long long>(*least), static_cast<long long>(*most));
    std::printf("RESULT grouped_gemm_%s_rows_grouped_tflops %.1f  (of dense %.3f; %s)\n",
                label.c_str(), rate[1] / 1e12, rate[1] / dense,
                moe::kernels::CublasHasGroupedGemm() ? "cublasGemmGroupedBatchedEx"
                                                     : "no grouped entry point: the loop twice");
    CutlassGroupedRow(label, x, w, y, counts, flop, dense, rehearse);
  }

  // 1b'. FP8 on tensor cores (cuBLASLt's block-scaled e4m3, kernels/fp8.h) at the same expert
  // shape: the forward GEMM including its two quantisation passes (what training pays), against
  // bf16's.
  if (rehearse) {
    std::printf("RESULT fp8_gemm_expert_shape_tflops skipped (CUDA only; the CPU emulates FP8)\n");
  } else if (const moe::Status st = moe::kernels::Fp8GemmSupport(dev); !st.ok()) {
    std::printf("RESULT fp8_gemm_expert_shape FAILED %s\n", st.message().c_str());
  } else {
    moe::Tensor x = moe::Tensor::Empty({rows, h}, moe::DType::kBF16, dev),
                w = moe::Tensor::Empty({2 * f, h}, moe::DType::kBF16, dev);
    moe::Tensor y = moe::Tensor::Empty({rows, 2 * f}, moe::DType::kF32, dev);
    moe::kernels::FillUniform(x, 3);
    moe::kernels::FillUniform(w, 4);
    moe::kernels::Fp8GemmForward(x, w, y);  // warm-up
    const double s = MedianSeconds(5, [&] { moe::kernels::Fp8GemmForward(x, w, y); });
    const double rate =
        2.0 * static_cast<double>(rows) * static_cast<double>(2 * f) * static_cast<double>(h) / s;
    std::printf("RESULT fp8_gemm_expert_shape_tflops %.1f  (%.2fx bf16's; quantisation included)\n",
                rate / 1e12, rate / dense);
  }

  // 1c. The routing plan for `tokens` tokens, 8 of 256 experts: built on the device with only the
  // per-expert counts read back, against the host path it replaced (read the [T, k] choices, build
  // on the host, upload the two permutations).
  {
    const int64_t t = rehearse ? 256 : tokens, kk = 8, e = 256;
    moe::Tensor idx = moe::Tensor::Empty({t, kk}, moe::DType::kI32);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < kk; ++j)
        idx.data<int32_t>()[i * kk + j] = static_cast<int32_t>((i * 37 + j * 32) % e);
    idx = rehearse ? idx : idx.Clone(dev);
    moe::Tensor counts = moe::Tensor::Empty({e}, moe::DType::kI64, dev),
                ros = moe::Tensor::Empty({t, kk}, moe::DType::kI32, dev);
    moe::Tensor tor = moe::Tensor::Empty({t * kk}, moe::DType::kI32, dev);
    const double device_s = MedianSeconds(20, [&] {
      moe::kernels::BuildDispatchPlanOnDevice(idx, e, counts, ros, tor);
      (void)counts.ToVector<int64_t>();
    });
    const double host_s = MedianSeconds(20, [&] {
      const std::vector<int32_t> host = idx.ToVector<int32_t>();
      const moe::kernels::DispatchPlan plan =
          moe::kernels::BuildDispatchPlan(host.data(), t, kk, e);
      ros.CopyFrom(moe::Tensor::FromVector(plan.row_of_slot, {t, kk}));
      tor.CopyFrom(moe::Tensor::FromVector(plan.token_of_row, {t * kk}));
    });
    std::printf("RESULT routing_plan_device_us %.1f  (%lld tokens, top-8 of 256)\n", device_s * 1e6,
                static_cast<long long>(t));
    std::printf("RESULT routing_plan_host_us %.1f  (device %.2fx faster)\n", host_s * 1e6,
                host_s / device_s);
  }

  // 2. The MoE layer at DeepSeek-V3 expert sizes, in bf16, then with its GEMMs in FP8.
  {
    // Megatron's count: routed experts 3 GEMMs x (fwd + 2 bwd) = 18 * rows * h * f; router 6 * T *
    // h * E.
    const double flops =
        18.0 * static_cast<double>(rows) * static_cast<double>(h) * static_cast<double>(f) +
        6.0 * static_cast<double>(tokens) * static_cast<double>(h) * static_cast<double>(experts);
    const MoeShape shape{tokens, h, f, experts, k};
    double imbalance = 0;
    const double s = BenchMoeLayer(shape, false, iters, dev, &imbalance);
    const double tflops = flops / s / 1e12;
    std::printf("RESULT moe_layer_ms %.2f\n", s * 1e3);
    std::printf("RESULT moe_layer_tflops %.1f\n", tflops);
    std::printf("RESULT moe_layer_of_dense %.3f\n", tflops * 1e12 / dense);
    std::printf("RESULT moe_layer_load_max_over_mean %.2f\n", imbalance);
    // The same layer with its forward grouped GEMMs through CUTLASS (MOE_GROUPED_GEMM=cutlass; the
    // backward stays cuBLAS's): whether CUTLASS's kernel pays inside the layer.
#ifndef MOE_WITH_SM90A
    std::printf("RESULT moe_layer_cutlass_fwd_tflops n/a (this build has no Hopper paths)\n");
#else
    if (rehearse) {
      std::printf(
          "RESULT moe_layer_cutlass_fwd_tflops n/a (rehearsal: CUTLASS needs an sm_90 GPU)\n");
    } else {
      const moe::kernels::GroupedGemmMode was = moe::kernels::GetGroupedGemmMode();
      moe::kernels::SetGroupedGemmMode(moe::kernels::GroupedGemmMode::kCutlass);
      const double sc = BenchMoeLayer(shape, false, iters, dev, &imbalance);
      moe::kernels::SetGroupedGemmMode(was);
      std::printf(
          "RESULT moe_layer_cutlass_fwd_tflops %.1f  (%.2fx the cuBLAS layer; forward "
          "GEMMs on CUTLASS where it takes them, said on stderr where not)\n",
          flops / sc / 1e12, s / sc);
    }
#endif
    if (const moe::Status st = moe::kernels::Fp8GemmSupport(dev); !rehearse && !st.ok()) {
      std::printf("RESULT moe_layer_fp8_tflops unavailable (%s)\n", st.message().c_str());
    } else {
      const double s8 = BenchMoeLayer(shape, true, iters, dev, &imbalance);
      std::printf("RESULT moe_layer_fp8_ms %.2f\n", s8 * 1e3);
      std::printf(
          "RESULT moe_layer_fp8_tflops %.1f  (%.2fx the bf16 layer; block-scaled e4m3, "
          "its quantisation included)\n",
          flops / s8 / 1e12, s / s8);
    }
  }

  // 3. Flash attention at S = 4096 (toy sizes when rehearsing).
  {
    const int64_t seq = rehearse ? 128 : 4096, heads = rehearse ? 2 : 128;
    BenchAttention("mla", seq, heads, 192, 128, dev, rehearse ? 1 : 10);
    BenchAttention("mha", seq, heads, 128, 128, dev, rehearse ? 1 : 10);
    // The engine's path above is cuDNN's fused SDPA where cuDNN takes the shape; ours beside it.
    const moe::kernels::AttentionKernels before = moe::kernels::GetAttentionKernels();
    moe::kernels::SetAttentionKernels(moe::kernels::AttentionKernels::kOurs);
    BenchAttention("mla_ours", seq, heads, 192, 128, dev, rehearse ? 1 : 10);
    BenchAttention("mha_ours", seq, heads, 128, 128, dev, rehearse ? 1 : 10);
    moe::kernels::SetAttentionKernels(before);
  }

  // 4. A training step at `small`.
  if (small_steps > 1) {
    moe::JobSpec spec;
    spec.name = "bench-small";
    spec.model = *moe::ModelPreset("small");
    spec.data.source = "synthetic";
    spec.data.seq_length = small_seq;
    spec.data.micro_batch_size = small_micro;
    spec.data.global_batch_size = small_micro * small_accum;
    spec.training.steps = small_steps;
    spec.resources.device = "cuda";
    moe::parallel::LocalParallel local;
    moe::train::TrainerOptions o;
    o.device = rehearse ? "cpu" : "cuda:0";
    if (rehearse) spec.model.num_layers = 2;
    o.precision = "bf16";
    o.peak_flops = peak;
    o.peak_source = "cuBLAS bf16 GEMM 8192^3 measured in this run";
    o.log_steps = false;
    double sum_tflops = 0, sum_ms = 0;
    int n = 0;
    o.on_step = [&](const moe::train::StepMetrics& m) {
      if (m.step == 1) return;
      sum_tflops += m.tflops_per_device;
      sum_ms += m.step_seconds * 1e3;
      ++n;
    };
    auto r = moe::train::Train(spec, local.ctx, o);
    if (!r.ok() || n == 0) {
      std::printf("RESULT small_step FAILED %s\n",
                  r.ok() ? "no steps" : r.status().ToString().c_str());
      return 1;
    }
    std::printf("RESULT small_step_shape %lld micro-batches of %lld x %lld tokens\n",
                static_cast<long long>(small_accum), static_cast<long long>(small_micro),
                static_cast<long long>(small_seq));
    std::printf("RESULT small_step_ms %.1f\n", sum_ms / n);
    std::printf("RESULT small_step_tflops %.1f\n", sum_tflops / n);
    std::printf("RESULT small_step_mfu %.3f\n", sum_tflops / n * 1e12 / peak);
  }
  return 0;
}
