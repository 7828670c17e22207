// The DeepSeek-V3-width slice on one device, the step users of this engine train
// (tests/gpu/perf.sh's "slice step" rows): hidden 7168; MLA with 128 heads, q LoRA 1536, kv LoRA
// 512, 128 + 64 / 128; one dense layer (FFN 18,432) and as many MoE layers as fit the card, each
// with 32 local experts of FFN 2,048, top-8 in 8 groups (4 kept), one shared expert; vocabulary
// 129,280 (32,768 where the card cannot hold it, said in the output); sequence 4,096; several
// micro-batches of one sequence a step; AdamW with bf16 moments (DeepSeek-V3's recipe). One
// configuration a run: the precision (bf16, fp8) and the routing (forced: balanced by random
// scores, as every published record runs; learned: the router on the data, its imbalance printed).
//
// Each step is timed on the device: its phases (worker/engine/parallel/step_profile.h, CUDA events
// between the engine's phase switches) add up to it. The figures are medians over the timed steps
// after the warm-up; TFLOP/s is Megatron's count (common/flops.h) over the device time, MFU against
// both the dense bf16 rate measured in this run (8192^3, random data) and the card's datasheet
// peak. Prints RESULT lines that perf.sh turns into its table.
//
//   moe-bench-slice [--precision bf16|fp8] [--routing forced|learned] [--moe-layers N (0: as many
//                   as fit)] [--vocab 129280] [--seq 4096] [--micro-batches 4] [--steps 10]
//                   [--warmup 2] [--datasheet-tflops X] [--measured-tflops X (0: measure)]
//                   [--rehearse-cpu]
// --rehearse-cpu: the same program at toy sizes on the CPU (tests the program; its figures mean
// nothing). The step after the timed ones runs traced by CUPTI (bench/kernel_trace.h): the kernels
// it launched, their device times over the step's, the bytes copied to the device and back.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/cuda_device.h"
#include "bench/kernel_trace.h"
#include "common/args.h"
#include "common/log.h"
#include "common/memory_model.h"
#include "common/presets.h"
#include "kernels/runtime.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/parallel/step_profile.h"
#include "worker/engine/train/peak.h"
#include "worker/engine/train/trainer.h"

namespace {

struct Options {
  std::string precision = "bf16", routing = "forced";
  int64_t moe_layers = 0, vocab = 129280, seq = 4096, micro_batches = 4, steps = 10, warmup = 2;
  double datasheet_tflops = 0, measured_tflops = 0;
  std::string measured_source = "given by --measured-tflops";
  bool rehearse = false;
};

constexpr int64_t kCutVocab = 32768;

moe::JobSpec SliceSpec(const Options& o, int64_t moe_layers, int64_t vocab) {
  moe::JobSpec spec;
  spec.name = "bench-slice";
  spec.model = *moe::ModelPreset("deepseek-v3-671b");
  spec.model.preset = "";
  spec.model.num_layers = 1 + moe_layers;
  spec.model.first_k_dense = 1;
  spec.model.mtp_depth = 0;
  spec.model.vocab_size = vocab;
  spec.model.moe.num_experts = 32;  // a rank's share of 256 at EP 8
  spec.model.moe.force_balanced_routing = o.routing == "forced";
  if (o.rehearse) {  // the same shape, toy widths
    spec.model.hidden_size = 64;
    spec.model.num_heads = 2;
    spec.model.dense_ffn_hidden = 96;
    spec.model.moe.ffn_hidden = 32;
    spec.model.attention.q_lora_rank = 32;
    spec.model.attention.kv_lora_rank = 16;
  }
  spec.data.source = "synthetic";
  spec.data.seq_length = o.seq;
  spec.data.micro_batch_size = 1;
  spec.data.global_batch_size = o.micro_batches;
  spec.optimizer.moments_dtype = "bf16";
  spec.training.steps = o.warmup + o.steps + 1;  // the last, after the timed ones, traced
  spec.training.log_interval = 1000000;
  spec.resources.device = o.rehearse ? "cpu" : "cuda";
  return spec;
}

// The largest slice the card holds with a tenth spare (the engine's memory model): the MoE layers
// asked for, or as many as fit (at most 8); the full vocabulary, or 32,768 when even one MoE layer
// does not fit with it.
moe::StatusOr<moe::JobSpec> FitSlice(const Options& o, std::string* layout) {
  const double capacity =
      o.rehearse ? 1e12 : 0.9 * static_cast<double>(moe::kernels::CudaDeviceMemoryBytes(0));
  if (capacity <= 0) return moe::InternalError("cannot read cuda:0's memory size");
  auto fits = [&](int64_t layers, int64_t vocab) {
    const auto plan = moe::EstimateMemory(SliceSpec(o, layers, vocab), 2);
    return plan.ok() && plan->largest().peak() <= capacity;
  };
  int64_t vocab = o.vocab, layers = o.moe_layers;
  if (layers == 0) {
    for (const int64_t v : {vocab, std::min(vocab, kCutVocab)}) {
      vocab = v;
      for (layers = 8; layers > 1 && !fits(layers, vocab); --layers) {
      }
      if (fits(layers, vocab)) break;
    }
  }
  char buf[256];
  const std::string cut = vocab < o.vocab ? " (cut from " + std::to_string(o.vocab) +
                                                ": that one does not fit this card)"
                                          : "";
  std::snprintf(buf, sizeof buf, "1 dense + %lld MoE layers, vocabulary %lld%s, %lld x %lld tokens",
                static_cast<long long>(layers), static_cast<long long>(vocab), cut.c_str(),
                static_cast<long long>(o.micro_batches), static_cast<long long>(o.seq));
  *layout = buf;
  return SliceSpec(o, layers, vocab);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// What the timed steps gave, and the traced one after them.
struct Steps {
  std::vector<double> device_s, host_s, flops, imbalance, syncs;
  std::vector<std::pair<std::string, double>> phases;  // summed over the timed steps
  moe::bench::TraceCounts traced;  // the step after the timed ones (CUPTI), when traced
  double traced_device_s = 0;
  std::string untraced;  // why not
};

void AddPhases(const std::vector<std::pair<std::string, double>>& rows, Steps* s) {
  for (const auto& [name, t] : rows) {
    auto it = std::find_if(s->phases.begin(), s->phases.end(),
                           [&](const auto& p) { return p.first == name; });
    if (it == s->phases.end()) {
      s->phases.emplace_back(name, t);
    } else {
      it->second += t;
    }
  }
}

moe::StatusOr<Steps> RunSlice(const Options& o, const moe::JobSpec& spec) {
  moe::parallel::StepProfile profile(o.rehearse ? moe::parallel::MakeHostPhaseClock()
                                                : moe::parallel::MakeDevicePhaseClock());
  moe::parallel::LocalParallel local;
  moe::train::TrainerOptions t;
  t.device = o.rehearse ? "cpu" : "cuda:0";
  t.precision = o.precision;
  t.peak_flops = o.measured_tflops * 1e12;
  t.peak_source = o.measured_source;
  t.log_steps = false;
  Steps s;
  std::unique_ptr<moe::bench::KernelTrace> trace;
  t.on_step = [&](const moe::train::StepMetrics& m) {
    const auto rows = profile.End();  // waits for the step's last mark: the device is idle
    double device = 0;
    for (const auto& [name, sec] : rows) device += sec;
    if (m.step == o.warmup + o.steps + 1) {  // the traced step: not among the timed ones
      if (trace) s.traced = trace->Take();
      if (!s.traced.incomplete.empty()) s.untraced = s.traced.incomplete;
      s.traced_device_s = device;
      trace.reset();
    } else if (m.step == o.warmup + o.steps) {  // CUPTI costs a little a kernel: the next step only
      if (o.rehearse) {
        s.untraced = "not counted on the CPU: CUPTI traces a GPU";
      } else {
        trace = moe::bench::KernelTrace::Start(&s.untraced);
      }
    }
    if (m.step > o.warmup && m.step <= o.warmup + o.steps) {
      s.device_s.push_back(device);
      s.host_s.push_back(m.step_seconds);
      s.flops.push_back(m.tflops_per_device * 1e12 * m.step_seconds);  // the step's FLOPs
      s.imbalance.push_back(m.expert_load_imbalance);
      s.syncs.push_back(static_cast<double>(m.host_syncs));
      AddPhases(rows, &s);
    }
    profile.Begin();
  };
  moe::parallel::InstallStepProfile(&profile);
  profile.Begin();
  auto r = moe::train::Train(spec, local.ctx, t);
  moe::parallel::InstallStepProfile(nullptr);
  if (!r.ok()) return r.status();
  if (s.device_s.empty()) return moe::InternalError("no timed step");
  return s;
}

void Print(const Options& o, const moe::JobSpec& spec, const std::string& layout, const Steps& s) {
  const int64_t moe_layers = spec.model.num_layers - 1, vocab = spec.model.vocab_size;
  const std::string key = "slice_" + o.precision + "_" + o.routing;
  const double step = Median(s.device_s), flops = Median(s.flops);
  const double tflops = flops / step / 1e12;
  std::printf("RESULT %s_layout %s\n", key.c_str(), layout.c_str());
  std::printf("RESULT %s_moe_layers %lld\n", key.c_str(), static_cast<long long>(moe_layers));
  std::printf("RESULT %s_vocab %lld\n", key.c_str(), static_cast<long long>(vocab));
  std::printf("RESULT %s_step_ms %.2f  (median of %zu steps on the device; host %.2f)\n",
              key.c_str(), step * 1e3, s.device_s.size(), Median(s.host_s) * 1e3);
  std::printf("RESULT %s_tflops %.1f  (Megatron's count)\n", key.c_str(), tflops);
  std::printf("RESULT %s_mfu_measured %.3f  (of %.1f TFLOP/s, %s)\n", key.c_str(),
              tflops / o.measured_tflops, o.measured_tflops, o.measured_source.c_str());
  if (o.datasheet_tflops > 0) {
    std::printf(
        "RESULT %s_mfu_datasheet %.3f  (of %.0f TFLOP/s, the card's dense bf16 datasheet)\n",
        key.c_str(), tflops / o.datasheet_tflops, o.datasheet_tflops);
  } else {
    std::printf("RESULT %s_mfu_datasheet unknown  (no datasheet figure given for this card)\n",
                key.c_str());
  }
  std::printf("RESULT %s_tokens_per_second %.0f\n", key.c_str(),
              static_cast<double>(o.micro_batches * o.seq) / step);
  std::printf("RESULT %s_expert_imbalance %.2f  (max over mean tokens per expert, worst layer)\n",
              key.c_str(), Median(s.imbalance));
  std::printf("RESULT %s_host_syncs_per_step %.0f\n", key.c_str(), Median(s.syncs));
  if (s.untraced.empty()) {
    const moe::bench::TraceCounts& c = s.traced;
    std::printf(
        "RESULT %s_launches_per_step %lld  (kernels completed in one step, every library's; "
        "CUPTI)\n",
        key.c_str(), static_cast<long long>(c.kernels));
    std::printf(
        "RESULT %s_kernel_time_over_step %.3f  (the kernels' device times summed, over that "
        "step's %.2f ms)\n",
        key.c_str(), c.kernel_seconds / std::max(1e-12, s.traced_device_s),
        s.traced_device_s * 1e3);
    std::printf(
        "RESULT %s_host_device_bytes_per_step %lld to the device, %lld back, in %lld copies\n",
        key.c_str(), static_cast<long long>(c.h2d_bytes), static_cast<long long>(c.d2h_bytes),
        static_cast<long long>(c.copies));
  } else {
    std::printf("RESULT %s_launches_per_step unavailable (%s)\n", key.c_str(), s.untraced.c_str());
  }
  const double n = static_cast<double>(s.device_s.size());
  double total = 0;
  for (const auto& [name, t] : s.phases) total += t;
  for (const auto& [name, t] : s.phases) {
    std::string k =
        name;  // a RESULT key has no spaces: "dispatch, permute fwd" -> dispatch/permute_fwd
    for (size_t at; (at = k.find(", ")) != std::string::npos;) k.replace(at, 2, "/");
    std::replace(k.begin(), k.end(), ' ', '_');
    std::printf("RESULT %s_phase:%s %.3f ms  (%.1f %% of the step)\n", key.c_str(), k.c_str(),
                t / n * 1e3, 100.0 * t / total);
  }
  std::printf(
      "RESULT %s_device_over_host %.3f  (the phases' sum, the step on the device, over the "
      "host's step time)\n",
      key.c_str(), total / n / (std::max(1e-12, Median(s.host_s))));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  moe::ArgParser args("moe-bench-slice",
                      "The DeepSeek-V3-width slice's training step on one device, phase by phase.");
  args.AddString("precision", &o.precision, "bf16 or fp8 (default bf16)");
  args.AddString("routing", &o.routing, "forced (balanced by random scores) or learned");
  args.AddInt("moe-layers", &o.moe_layers, "MoE layers after the dense one (0: as many as fit)");
  args.AddInt("vocab", &o.vocab, "vocabulary (default 129280; cut to 32768 when it does not fit)");
  args.AddInt("seq", &o.seq, "sequence length (default 4096)");
  args.AddInt("micro-batches", &o.micro_batches,
              "micro-batches of one sequence a step (default 4)");
  args.AddInt("steps", &o.steps, "timed steps (default 10)");
  args.AddInt("warmup", &o.warmup, "untimed steps first (default 2)");
  args.AddDouble("datasheet-tflops", &o.datasheet_tflops, "the card's dense bf16 datasheet peak");
  args.AddDouble("measured-tflops", &o.measured_tflops,
                 "the dense bf16 rate to divide by (0: measure cuBLAS 8192^3 now)");
  args.AddFlag("rehearse-cpu", &o.rehearse,
               "run at toy sizes on the CPU (tests this program; the figures mean nothing)");
  if (auto st = args.Parse(argc, argv); !st.ok() || args.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ok() ? "" : st.message().c_str(), args.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  auto bad = [](const char* what) {
    std::fprintf(stderr, "moe-bench-slice: %s\n", what);
    return 2;
  };
  if (o.precision != "bf16" && o.precision != "fp8") return bad("--precision: bf16 or fp8");
  if (o.routing != "forced" && o.routing != "learned") return bad("--routing: forced or learned");
  if (o.moe_layers < 0 || o.moe_layers > 61) return bad("--moe-layers: 0 (as many as fit) to 61");
  if (o.vocab < 2) return bad("--vocab: at least 2");
  if (o.seq < 16 || o.micro_batches < 1)
    return bad("--seq: at least 16; --micro-batches: at least 1");
  if (o.steps < 1 || o.warmup < 1) return bad("--steps and --warmup: at least 1 each");
  moe::SetLogLevel(moe::LogLevel::kWarning);
  if (o.rehearse) {
    o.vocab = std::min<int64_t>(o.vocab, 512);
    o.seq = std::min<int64_t>(o.seq, 64);
    o.steps = std::min<int64_t>(o.steps, 2);
    o.warmup = 1;
    if (o.moe_layers == 0) o.moe_layers = 1;
    if (o.measured_tflops <= 0) {
      const moe::train::PeakFlops peak = moe::train::MeasureCpuSgemmPeak();
      o.measured_tflops = peak.flops_per_second / 1e12;
      o.measured_source = peak.source;
    }
  } else {
    if (const int rc = moe::bench::UseFirstCudaDevice("moe-bench-slice"); rc != 0) return rc;
    if (o.measured_tflops <= 0) {
      o.measured_tflops = moe::kernels::MeasureCudaBf16GemmFlops(8192, 10) / 1e12;
      o.measured_source = "cuBLAS bf16 GEMM 8192^3, random data, measured in this run";
    }
  }
  std::printf("RESULT slice_device %s\n", o.rehearse ? "cpu (rehearsal: the figures mean nothing)"
                                                     : moe::kernels::CudaDeviceName(0).c_str());
  std::string layout;
  const auto fitted = FitSlice(o, &layout);
  if (!fitted.ok()) {
    std::printf("RESULT slice_%s_%s FAILED %s\n", o.precision.c_str(), o.routing.c_str(),
                fitted.status().ToString().c_str());
    return 1;
  }
  const moe::JobSpec& spec = *fitted;
  std::printf("slice: %s, %s, %s routing; %lld steps after %lld of warm-up\n", layout.c_str(),
              o.precision.c_str(), o.routing.c_str(), static_cast<long long>(o.steps),
              static_cast<long long>(o.warmup));
  std::fflush(stdout);
  auto steps = RunSlice(o, spec);
  if (!steps.ok()) {
    std::printf("RESULT slice_%s_%s FAILED %s\n", o.precision.c_str(), o.routing.c_str(),
                steps.status().ToString().c_str());
    return 1;
  }
  Print(o, spec, layout, *steps);
  return 0;
}
