// moe-eval: the loss of stored weights on data or on given tokens.
//
//   moe-eval (--checkpoint DIR | --hf DIR)
//            (--data PREFIX [--split valid|test|train|all] [--batches N] [--dump-tokens FILE.npy]
//             | --tokens FILE.npy [--dump-logits FILE.npy])
//            [--seq-length N] [--batch-size N] [--device cpu|cuda|cuda:N] [--precision fp32|bf16]
//            [--threads T]
//
// --checkpoint takes the engine's checkpoints (the newest complete step of a directory, or one
// step_* directory), whatever layout wrote them, and the data shape (seq_length, global and micro
// batch, the split) from the job they were written for: the same batches as the run's own
// evaluation, so the loss is the run's last eval loss (bitwise in fp32 for a W = 1 run). --hf takes
// a DeepseekV3 directory (config.json + safetensors), alone (--tokens, or --data with the shape
// flags) or with the --job it was trained by. Both build the model the weights were trained as:
// the rotary frequencies of the run's sequence length (YaRN when it applied), whatever the scored
// sequences' length. --tokens scores an integer array [sequences, positions]: the mean
// cross-entropy of each position's prediction of the next (positions 0..P-2, by the same evaluator
// and micro-batches as --data: --data --dump-tokens writes the sequences it scored, and --tokens of
// them prints the same loss, bit for bit); --dump-logits writes the float32 logits of the scored
// positions [sequences, positions - 1, vocab] as .npy. One process; it refuses a model
// that does not fit in this machine's memory, with both figures. Exit codes as moe-train's
// (common/rank_end.h).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "common/args.h"
#include "common/log.h"
#include "common/memory_model.h"
#include "common/rank_end.h"
#include "kernels/elementwise.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/checkpoint/npy.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/device.h"
#include "worker/engine/model/saved.h"
#include "worker/engine/parallel/local_communicator.h"
#include "worker/engine/train/evaluator.h"

namespace {

struct Flags {
  std::string checkpoint, hf, job, data, split, tokens, dump_logits, dump_tokens,
      device = "cpu", precision, log_level = "warning";
  int64_t batches = 0, seq_length = 0, batch_size = 0, threads = 0;
};

int Fail(const moe::Status& st) {
  std::fprintf(stderr, "moe-eval: %s\n", st.ToString().c_str());
  return moe::RankEndFor(st).exit_code();
}

moe::Status Parse(int argc, char** argv, Flags* f, bool* help, std::string* usage) {
  moe::ArgParser args(
      "moe-eval",
      "The loss of a checkpoint or a Hugging Face DeepseekV3 directory on data or tokens.");
  args.AddString("checkpoint", &f->checkpoint,
                 "the engine's checkpoint directory (or one step_* directory in it)");
  args.AddString("hf", &f->hf, "a Hugging Face DeepseekV3 directory (config.json + safetensors)");
  args.AddString(
      "job", &f->job,
      "with --hf: a job file whose data shape (seq_length, batches, split, eval_batches) to use");
  args.AddString("data", &f->data, "an indexed dataset prefix (moe-prep's output)");
  args.AddString("split", &f->split,
                 "with --data: valid, test, train or all, by the job's data.split (default valid; "
                 "all with --hf and no --job)");
  args.AddInt("batches", &f->batches,
              "with --data: global batches to evaluate (default: the job's eval_batches, else 1)");
  args.AddString("tokens", &f->tokens, "an integer .npy array [sequences, positions] to score");
  args.AddString(
      "dump-logits", &f->dump_logits,
      "with --tokens: write the float32 logits [sequences, positions, vocab] here (.npy)");
  args.AddString(
      "dump-tokens", &f->dump_tokens,
      "with --data: write the sequences scored, int64 [sequences, seq_length + 1] (.npy; "
      "--tokens of it scores them again)");
  args.AddInt("seq-length", &f->seq_length,
              "with --data: tokens per sequence (default: the job's; 256 with --hf)");
  args.AddInt("batch-size", &f->batch_size,
              "sequences per batch (default: the job's global batch; 8 with --hf); --tokens runs "
              "them in micro-batches of this size");
  args.AddString("device", &f->device, "cpu (default), cuda or cuda:N");
  args.AddString("precision", &f->precision, "fp32 or bf16 (default: bf16 on cuda, fp32 on cpu)");
  args.AddInt("threads", &f->threads, "CPU threads (default: all cores)");
  args.AddString("log-level", &f->log_level, "debug | info | warning | error");
  MOE_RETURN_IF_ERROR(args.Parse(argc, argv));
  *help = args.help_requested();
  *usage = args.Usage();
  if (*help) return moe::OkStatus();
  if (f->checkpoint.empty() == f->hf.empty())
    return moe::InvalidArgumentError("--checkpoint or --hf: give exactly one");
  if (f->data.empty() == f->tokens.empty())
    return moe::InvalidArgumentError("--data or --tokens: give exactly one");
  if (!f->dump_logits.empty() && f->tokens.empty())
    return moe::InvalidArgumentError("--dump-logits: only with --tokens");
  if (!f->dump_tokens.empty() && f->data.empty())
    return moe::InvalidArgumentError("--dump-tokens: only with --data");
  if (!f->job.empty() && f->hf.empty())
    return moe::InvalidArgumentError("--job: only with --hf (a checkpoint carries its job)");
  if (f->split.empty()) f->split = !f->hf.empty() && f->job.empty() ? "all" : "valid";
  if (f->split != "valid" && f->split != "test" && f->split != "train" && f->split != "all") {
    return moe::InvalidArgumentError("--split: '" + f->split +
                                     "' is not valid, test, train or all");
  }
  if (f->batches < 0 || f->seq_length < 0 || f->batch_size < 0) {
    return moe::InvalidArgumentError("--batches, --seq-length, --batch-size: must be > 0");
  }
  moe::LogLevel level;
  if (!moe::ParseLogLevel(f->log_level, &level))
    return moe::InvalidArgumentError("--log-level: unknown level '" + f->log_level + "'");
  moe::SetLogLevel(level);
  return moe::CheckPrecision(f->precision);
}

// The job the weights came from (--checkpoint) or one around the --hf model, shaped by the flags,
// at W = 1. *rope_length: the sequence length the weights' rotary frequencies were built for (the
// run's seq_length, or the HF config's max_position_embeddings): whatever is scored, by --data or
// --tokens, the model is the one that was trained, YaRN included when it applied.
moe::StatusOr<moe::JobSpec> EvalSpec(const Flags& f, std::string* step_dir, int64_t* rope_length) {
  moe::JobSpec spec;
  if (!f.checkpoint.empty()) {
    MOE_ASSIGN_OR_RETURN(spec, moe::checkpoint::CheckpointJobSpec(f.checkpoint, step_dir));
    *rope_length = spec.data.seq_length;
  } else {
    MOE_ASSIGN_OR_RETURN(const moe::ModelConfig hf_model,
                         moe::checkpoint::HfModelConfig(f.hf, rope_length));
    if (!f.job.empty()) {
      MOE_ASSIGN_OR_RETURN(
          spec,
          moe::LoadJobSpecFile(f.job));  // its model is checked against config.json
    } else {
      spec.model = hf_model;
      spec.name = "moe-eval";
      spec.data.seq_length = 256;
      spec.data.global_batch_size = spec.data.micro_batch_size = 8;
      spec.data.split = "";
    }
  }
  if (!f.tokens.empty()) spec.data.source = "synthetic";  // no dataset is read
  spec.parallelism = moe::ParallelismConfig();
  spec.data.batch_ramp = moe::BatchRampConfig();
  spec.training.eval_interval = 0;
  spec.resources.device =
      "cpu";  // the flag decides where it runs (ValidateJobSpec checks CPU-only options)
  if (!f.data.empty()) {
    spec.data.source = "indexed";
    spec.data.path = f.data;
  }
  if (f.seq_length > 0) spec.data.seq_length = f.seq_length;
  if (f.batch_size > 0) {
    spec.data.global_batch_size = f.batch_size;
    if (f.batch_size % spec.data.micro_batch_size != 0) spec.data.micro_batch_size = f.batch_size;
  }
  MOE_RETURN_IF_ERROR(moe::ValidateJobSpec(spec).WithPrefix(
      "the evaluation's job (flags over the checkpoint's spec)"));
  return spec;
}

// Refuses a model that cannot fit: its weights, the gradient buffers every parameter carries, and
// one micro-batch's activations, against the memory this machine has free.
moe::Status CheckFits(const moe::JobSpec& spec, const moe::DevicePlacement& place) {
  if (!place.device.is_cpu())
    return moe::OkStatus();  // the allocator reports a GPU's own out-of-memory
  MOE_ASSIGN_OR_RETURN(const moe::MemoryPlan plan,
                       moe::EstimateMemory(spec, place.compute == moe::DType::kBF16 ? 2 : 4));
  const moe::StageMemory& s = plan.largest();
  const double need = s.bytes[0] + s.bytes[1] + s.bytes[3];
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0, available = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemAvailable:") available = kb * 1024;
    meminfo.ignore(256, '\n');
  }
  if (available > 0 && need > available) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "the model needs about %.1f GB (weights %.1f GB, gradient buffers %.1f GB, "
                  "activations %.1f GB); "
                  "this machine has %.1f GB available",
                  need / 1e9, s.bytes[0] / 1e9, s.bytes[1] / 1e9, s.bytes[3] / 1e9,
                  available / 1e9);
    return moe::FailedPreconditionError(buf);
  }
  return moe::OkStatus();
}

moe::data::DataSplit SplitOf(const std::string& s) {
  if (s == "train") return moe::data::DataSplit::kTrain;
  if (s == "test") return moe::data::DataSplit::kTest;
  if (s == "all") return moe::data::DataSplit::kAll;
  return moe::data::DataSplit::kValid;
}

void PrintResult(const moe::train::EvalResult& r, const moe::model::Model& model) {
  std::printf("eval loss: %.17g (ppl %.6g) over %lld tokens\n", r.loss, r.ppl(),
              static_cast<long long>(r.tokens));
  if (model.mtp_trains() && r.mtp_loss > 0) std::printf("eval mtp loss: %.17g\n", r.mtp_loss);
}

moe::Status EvalData(const Flags& f, moe::JobSpec spec, moe::model::Model& model,
                     const moe::parallel::ParallelContext& ctx) {
  const moe::data::DataSplit which = SplitOf(f.split);
  MOE_ASSIGN_OR_RETURN(auto sampler, moe::data::BatchSampler::Create(spec, 1, which));
  const int64_t batches =
      f.batches > 0 ? f.batches : (f.checkpoint.empty() ? 1 : spec.training.eval_batches);
  std::fprintf(stderr, "moe-eval: %lld batch(es) of %lld x %lld tokens from the %s split of %s\n",
               static_cast<long long>(batches), static_cast<long long>(spec.data.global_batch_size),
               static_cast<long long>(spec.data.seq_length), moe::data::DataSplitName(which),
               spec.data.path.c_str());
  // The sequences scored, each with its last target: [sequences, seq_length + 1].
  moe::checkpoint::NpyInts scored;
  const int64_t s = spec.data.seq_length;
  auto keep = [&](const moe::Tensor& tokens, const moe::Tensor& targets) {
    for (int64_t b = 0; b < tokens.dim(0); ++b) {
      for (int64_t i = 0; i < s; ++i) scored.values.push_back(tokens.data<int32_t>()[b * s + i]);
      scored.values.push_back(targets.data<int32_t>()[b * s + s - 1]);
    }
  };
  MOE_ASSIGN_OR_RETURN(
      const moe::train::EvalResult r,
      moe::train::EvaluateBatches(model, ctx, spec, *sampler, batches,
                                  f.dump_tokens.empty() ? moe::train::EvalBatchFn() : keep));
  PrintResult(r, model);
  if (f.dump_tokens.empty()) return moe::OkStatus();
  scored.shape = {static_cast<int64_t>(scored.values.size()) / (s + 1), s + 1};
  MOE_RETURN_IF_ERROR(moe::checkpoint::WriteNpyInts(f.dump_tokens, scored));
  std::fprintf(stderr, "moe-eval: wrote %s (int64 [%lld, %lld])\n", f.dump_tokens.c_str(),
               static_cast<long long>(scored.shape[0]), static_cast<long long>(scored.shape[1]));
  return moe::OkStatus();
}

// The array's sequences [n, P] as micro-batches of the job's micro_batch_size (the last may be
// smaller): inputs are positions 0..P-2, targets 1..P-1, through the same Evaluator as --data, so
// the same sequences give the same loss bit for bit (moe-eval --data --dump-tokens writes them).
moe::Status EvalTokens(const Flags& f, const moe::JobSpec& spec, moe::model::Model& model,
                       const moe::parallel::ParallelContext& ctx) {
  MOE_ASSIGN_OR_RETURN(const moe::checkpoint::NpyInts t, moe::checkpoint::ReadNpyInts(f.tokens));
  if (t.shape.size() != 2 || t.shape[1] < 2)
    return moe::InvalidArgumentError("--tokens: expected [sequences, positions >= 2], got " +
                                     std::to_string(t.shape.size()) + " dims");
  const int64_t n = t.shape[0], p = t.shape[1], s = p - 1, v = model.config().vocab_size;
  for (int64_t x : t.values) {
    if (x < 0 || x >= v)
      return moe::InvalidArgumentError("--tokens: token id " + std::to_string(x) +
                                       " outside the vocabulary [0, " + std::to_string(v) + ")");
  }
  std::unique_ptr<moe::checkpoint::NpyFloatWriter> dump;
  if (!f.dump_logits.empty()) {
    MOE_ASSIGN_OR_RETURN(dump, moe::checkpoint::NpyFloatWriter::Create(f.dump_logits, {n, s, v}));
  }
  moe::train::Evaluator eval(model, ctx, 1);
  const int64_t mbs = std::max<int64_t>(1, spec.data.micro_batch_size);
  const moe::Device dev = model.device();
  for (int64_t first = 0; first < n; first += mbs) {
    const int64_t b = std::min(mbs, n - first);
    moe::Tensor tokens = moe::Tensor::Empty({b, s}, moe::DType::kI32),
                targets = moe::Tensor::Empty({b, s}, moe::DType::kI32);
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t i = 0; i < s; ++i) {
        const auto at = static_cast<size_t>((first + r) * p + i);
        tokens.data<int32_t>()[r * s + i] = static_cast<int32_t>(t.values[at]);
        targets.data<int32_t>()[r * s + i] = static_cast<int32_t>(t.values[at + 1]);
      }
    }
    MOE_RETURN_IF_ERROR(eval.Add(dev.is_cpu() ? tokens : tokens.Clone(dev),
                                 dev.is_cpu() ? targets : targets.Clone(dev)));
    if (dump) {
      const moe::Tensor logits = model.last_logits().Clone(moe::Device::Cpu());
      moe::Tensor f32 = moe::Tensor::Empty(logits.shape(), moe::DType::kF32);
      moe::kernels::Convert(logits, f32);
      MOE_RETURN_IF_ERROR(dump->Append(f32.data<float>(), b * s * v));
    }
  }
  MOE_ASSIGN_OR_RETURN(const moe::train::EvalResult r, eval.Finish());
  if (dump) MOE_RETURN_IF_ERROR(dump->Close());
  PrintResult(r, model);
  if (dump)
    std::fprintf(stderr, "moe-eval: wrote %s (float32 [%lld, %lld, %lld])\n", f.dump_logits.c_str(),
                 static_cast<long long>(n), static_cast<long long>(s), static_cast<long long>(v));
  return moe::OkStatus();
}

moe::Status Run(const Flags& f) {
  std::string step_dir;
  int64_t rope_length = 0;
  MOE_ASSIGN_OR_RETURN(moe::JobSpec spec, EvalSpec(f, &step_dir, &rope_length));
  MOE_ASSIGN_OR_RETURN(const moe::DevicePlacement place, moe::PlaceRank(f.device, f.precision, 0));
  MOE_RETURN_IF_ERROR(CheckFits(spec, place));
  moe::kernels::SetNumThreads(
      static_cast<int>(f.threads > 0 ? f.threads : ::sysconf(_SC_NPROCESSORS_ONLN)));
  // The GEMMs the run trained with (training.deterministic: the same sums whatever the thread
  // count).
  moe::kernels::SetReproducibleCpuGemm(place.device.is_cpu() && spec.training.Deterministic(true));
  moe::parallel::LocalParallel local;
  moe::model::ModelOptions mo;
  mo.device = place.device;
  mo.compute = place.compute;
  mo.max_seq_len = rope_length;  // the same model by --data and by --tokens
  moe::model::Model model(spec.model, local.ctx, spec.training.seed, mo);
  if (!f.checkpoint.empty()) {
    MOE_RETURN_IF_ERROR(moe::checkpoint::LoadCheckpointWeights(step_dir, model));
    std::fprintf(stderr, "moe-eval: weights of %s on %s, %s\n", step_dir.c_str(),
                 place.name.c_str(), place.precision.c_str());
  } else {
    MOE_RETURN_IF_ERROR(moe::checkpoint::LoadHfWeights(f.hf, model, local.ctx));
    std::fprintf(stderr, "moe-eval: weights of %s on %s, %s\n", f.hf.c_str(), place.name.c_str(),
                 place.precision.c_str());
  }
  return f.tokens.empty() ? EvalData(f, spec, model, local.ctx)
                          : EvalTokens(f, spec, model, local.ctx);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  bool help = false;
  std::string usage;
  if (moe::Status st = Parse(argc, argv, &f, &help, &usage); !st.ok()) return Fail(st);
  if (help) {
    std::printf("%s", usage.c_str());
    return moe::kExitOk;
  }
  if (moe::Status st = Run(f); !st.ok()) return Fail(st);
  return moe::kExitOk;
}
